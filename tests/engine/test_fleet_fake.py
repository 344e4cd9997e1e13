"""`rewardprof fleet` against the stand-in vLLM (fast; the real engine behind a fleet is in
test_real_doc_commands.py): start publishes the replicas as they turn ready, a replica killed with
SIGKILL is dropped from the endpoints and started again, stop leaves no process behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml
from engine_helpers import fake_engine_python, new_mark
from helpers import wait_for

from rewardprof.engine.endpoints import read_endpoints
from rewardprof.engine.host import processes_with_env
from rewardprof.store.layout import FleetLayout, RunLayout

REWARDPROF = str(Path(sys.executable).parent / "rewardprof")


def _fleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [REWARDPROF, "fleet", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def _replica(paths: FleetLayout, i: int) -> dict:
    try:
        return json.loads(paths.replica(i).read_text())
    except (OSError, ValueError):
        return {}


def test_fleet_start_failover_stop(tmp_path):
    name, value, needle = new_mark()
    cfg = {
        "run": "f",
        "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
        "engine": {
            "mode": "endpoint",
            "endpoints_file": "results/f/fleet/endpoints.json",
            "model": "fake/model",
            "python": fake_engine_python(tmp_path),
            "startup_timeout_s": 60,
            "stop_grace_s": 2,
            "serve_env": {name: value},
        },
        "fleet": {"replicas": 2, "restarts": 1},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    paths = FleetLayout(RunLayout(tmp_path / "results" / "f"))
    try:
        out = _fleet("start", "--config", "c.yaml", "--wait", "120", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        wait_for(lambda: len(read_endpoints(paths.endpoints)) == 2, "both replicas published", 120)
        urls = read_endpoints(paths.endpoints)
        assert all(_healthy(u) for u in urls)
        st = json.loads(_fleet("status", str(paths.dir.parent), "--json", cwd=tmp_path).stdout)
        assert st["running"] and st["launcher"] == "local" and st["endpoints"] == urls

        # SIGKILL replica 0's server: dropped from the endpoints, then started again
        killed = _replica(paths, 0)
        os.killpg(killed["pid"], signal.SIGKILL)
        wait_for(lambda: killed["url"] not in read_endpoints(paths.endpoints), "dropped", 60)
        wait_for(lambda: _replica(paths, 0).get("starts") == 2, "restarted", 60)
        wait_for(lambda: len(read_endpoints(paths.endpoints)) == 2, "republished", 120)
        assert _replica(paths, 0)["url"] != killed["url"]  # a new server on a new port
    finally:
        stopped = _fleet("stop", str(paths.dir.parent), cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    assert read_endpoints(paths.endpoints) == []  # clients see a fleet with no replica
    assert processes_with_env(needle) == [], "replica processes outlived the fleet"
    state = json.loads(paths.state.read_text())
    wait_for(lambda: not os.path.exists(f"/proc/{state['pid']}"), "fleet process gone", 30)

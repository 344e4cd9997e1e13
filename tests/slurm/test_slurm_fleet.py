"""A shared fleet as one Slurm job on the local cluster: `rewardprof fleet start` with
`fleet.launcher: slurm` submits one job whose tasks (srun, one per replica) serve the vLLM
stand-in (rewardprof.testing.vllm_standin, the simulated engine); the replicas' URLs are
published in the run directory; a whole workflow run uses them as a client (endpoint mode on
the endpoints file, no engine of its own); `rewardprof fleet stop` cancels the job and no
process of the fleet is left."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import math_row, require_piece, snakemake, wait_for, write_jsonl
from slurm_helpers import slurm_available

from rewardprof.engine.endpoints import read_endpoints
from rewardprof.engine.host import processes_with_env
from rewardprof.store.layout import FleetLayout, RunLayout
from rewardprof.testing.vllm_standin import write_standin_python

pytestmark = pytest.mark.slurm

REWARDPROF = str(Path(sys.executable).parent / "rewardprof")
TASKS, K = 12, 2


def _fleet(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [REWARDPROF, "fleet", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def _job_state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip()


def test_a_fleet_on_slurm_serves_a_run_and_stops_with_its_job(tmp_path):
    ok, why = slurm_available()
    require_piece("local Slurm cluster", ok, why)
    mark = uuid.uuid4().hex[:12]
    write_jsonl(
        tmp_path / "data/m.jsonl", [math_row(f"What is {i} + 1?", str(i + 1)) for i in range(TASKS)]
    )
    cfg = {
        "run": "f",
        "num_shards": 2,
        "entries": [
            {"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}
        ],
        "engine": {
            "mode": "endpoint",
            "endpoints_file": "results/f/fleet/endpoints.json",
            "model": "sim-model",
            "host": "0.0.0.0",  # published with the node's host name
            "python": str(write_standin_python(tmp_path / "standin")),
            "startup_timeout_s": 120,
            "stop_grace_s": 2,
            "serve_env": {"RP_TEST_MARK": mark, "REWARDPROF_SIM_ARGS": "--median-tokens 40"},
        },
        "sampling": {"max_tokens": 64},
        "fleet": {
            "replicas": 2,
            "launcher": "slurm",
            "sbatch_args": ["--mem=500", "--cpus-per-task=1", "--time=10"],
        },
    }
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(cfg))
    paths = FleetLayout(RunLayout(tmp_path / "results" / "f"))
    job = None
    try:
        out = _fleet("start", "--config", "c.yaml", "--wait", "240", cwd=tmp_path)
        assert out.returncode == 0, out.stderr + out.stdout
        state = json.loads(paths.state.read_text())
        job = state["job_id"]
        assert state["launcher"] == "slurm" and _job_state(job) == "RUNNING"
        assert (paths.dir / "fleet.sbatch").read_text().count("srun") == 1
        # --wait returns with the first replica published; the other follows
        wait_for(lambda: len(read_endpoints(paths.endpoints)) == 2, "both replicas", 120)
        urls = read_endpoints(paths.endpoints)
        assert len(set(urls)) == 2
        assert all(u.startswith(f"http://{socket.gethostname()}:") for u in urls), urls
        st = json.loads(_fleet("status", str(paths.dir.parent), "--json", cwd=tmp_path).stdout)
        assert st["running"] and st["launcher"] == "slurm" and st["endpoints"] == urls

        # the workflow's rollout jobs are clients of the fleet: no engine of their own
        r = snakemake(tmp_path, "--configfile", str(config))
        assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
        rollouts = pd.read_parquet(tmp_path / "results/f/rollouts.parquet")
        assert len(rollouts) == TASKS * K and rollouts["status"].eq("ok").all()
        # each shard's client balanced over both replicas (in flight counted at the pick: the
        # second of two concurrent requests goes to the other replica)
        for i in range(2):
            beat = json.loads((tmp_path / f"results/f/rollouts/status/{i}-of-2.json").read_text())
            assert sorted(r["url"] for r in beat["replicas"]) == sorted(urls)
            assert all(r["done"] > 0 and r["errors"] == 0 for r in beat["replicas"]), beat
    finally:
        stopped = _fleet("stop", str(paths.dir.parent), cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr
    wait_for(lambda: _job_state(job) in ("", "COMPLETED", "CANCELLED"), "the fleet's job", 60)
    assert read_endpoints(paths.endpoints) == []  # clients see a fleet with no replica
    wait_for(lambda: processes_with_env(f"RP_TEST_MARK={mark}") == [], "no fleet process", 60)

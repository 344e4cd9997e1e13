"""A rollout job while it runs, as `rewardprof rollout` (the command a rule runs) against the
fake engine: `rewardprof status` mid-run and after, the whole run's progress line on the job's
stdout (what Snakemake shows in the controller's terminal), and a dead endpoint stopping the job.

"In progress" lands by construction: the fake server serves a fixed number of requests and
holds every later one (`hold_after`) until the test has taken the status; the endpoint dies
while requests are held (the server is stopped), so the job is mid-run when it loses it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import shardkit as kit
from harness.live_run import beat, rollout_job, run_dir, status_cli, wait_for

from rewardprof.store.layout import RunLayout
from rewardprof.testing.fake_server import FakeOpenAI
from rewardprof.tools.status import collect

N = 2  # shards
TASKS = 20  # 10 per shard, K=2, one request (n=2) per task
K = 2


@pytest.fixture
def server():
    with FakeOpenAI(kit.answer) as s:
        yield s


def _run_dir(tmp_path: Path, base_url: str, **rollout) -> tuple[RunLayout, Path]:
    return run_dir(tmp_path, base_url, TASKS, K, N, **rollout)


def _held_mid_run(server: FakeOpenAI, layout: RunLayout, served: int) -> None:
    """Wait until shard 0's job has `served` requests answered and journaled (its heartbeat
    says so) and is waiting on held ones."""
    wait_for(lambda: server.gate_held >= 1, "a held request")
    wait_for(lambda: beat(layout, 0).get("generated") == served * K, "the heartbeat")


def test_status_of_a_run_in_progress_and_finished(tmp_path, server):
    layout, config = _run_dir(tmp_path, server.base_url)
    server.hold_after(3)
    log = tmp_path / "logs" / "0.log"
    job = rollout_job(layout, config, 0, log)
    try:
        _held_mid_run(server, layout, 3)
        st = collect(layout.root)
        text = status_cli(layout)
        # the log gets its line every interval also while no rollout finishes (held)
        stalled = "[0-of-2] 6/20 rollouts, "
        wait_for(
            lambda: sum(ln.startswith(stalled) for ln in log.read_text().splitlines()) >= 3,
            "progress lines while requests are held",
        )
        watcher = subprocess.Popen(
            [sys.executable, "-m", "rewardprof.cli", "status", str(layout.root), "--watch", "0.1"],
            stdout=subprocess.PIPE,
            text=True,
        )
    finally:
        server.hold_after(None)  # let the job finish
    out, _ = job.communicate(timeout=120)
    assert job.returncode == 0, log.read_text()

    # mid-run: 3 requests of 2 rollouts answered, the rest held
    s0, s1 = st["shards"]
    assert (s0["state"], s0["done"], s0["expected"], s0["ok"]) == ("running", 6, 20, 6)
    assert s0["rollouts_per_s"] > 0 and s0["tokens_per_s"] > 0 and s0["eta"] not in (None, "0s")
    assert (s1["state"], s1["done"], s1["expected"]) == ("pending", 0, 20)
    assert (st["done"], st["expected"], st["running"], st["stopped"]) == (6, 40, 1, [])
    assert st["eta"] not in (None, "0s")
    assert "6/40 rollouts (15.0%)" in text
    assert "0 of 2 done, 1 running, 0 stopped" in text
    assert any(line.startswith("0-of-2") and "running" in line for line in text.splitlines())
    assert any(line.startswith("1-of-2") and "pending" in line for line in text.splitlines())

    # the job's stdout carried the whole run's line every interval (Snakemake shows it)
    run_lines = [line for line in out.splitlines() if line.startswith("rewardprof: rollouts ")]
    assert any("/40 (" in line and "[0-of-2: " in line for line in run_lines), out

    # shard 1 too, then the finished run
    job = rollout_job(layout, config, 1, tmp_path / "logs" / "1.log")
    job.communicate(timeout=120)
    assert job.returncode == 0
    # --watch redrew the status until every shard was done, then ended by itself
    watched, _ = watcher.communicate(timeout=120)
    assert watcher.returncode == 0
    snapshots = watched.split("\n\n" + str(layout.root))
    assert len(snapshots) >= 2 and "2 of 2 done" in snapshots[-1]
    done = json.loads(status_cli(layout, "--json"))
    assert (done["done"], done["expected"], done["finished"], done["running"]) == (40, 40, 2, 0)
    assert [s["state"] for s in done["shards"]] == ["done", "done"]
    assert done["failures"] == {} and done["eta"] is None
    assert all(s["rollouts_per_s"] > 0 for s in done["shards"])  # the jobs' average rates


def test_dead_endpoint_stops_the_job_with_one_line(tmp_path, server):
    limit = 2.0
    layout, config = _run_dir(tmp_path, server.base_url, endpoint_down_s=limit)
    server.hold_after(2)
    log = tmp_path / "logs" / "0.log"
    job = rollout_job(layout, config, 0, log)
    _held_mid_run(server, layout, 2)
    killed = time.monotonic()
    server.stop()  # the endpoint is gone: held requests are cut, new ones refused
    job.communicate(timeout=120)
    took = time.monotonic() - killed
    assert job.returncode != 0
    assert limit <= took < 90
    last = log.read_text().strip().splitlines()[-1]
    assert last.startswith("rewardprof rollout: error: 0-of-2: engine endpoint:http://127.0.0.1:")
    assert f"every request failed with a connection error for {limit:.0f}s" in last
    error_text = last.split("last error: ", 1)[1]
    assert "Cannot connect to host 127.0.0.1" in error_text, last

    st = collect(layout.root)
    s0 = st["shards"][0]
    # the held requests may have been answered as the server shut down; nothing else was,
    # and no rollout was recorded as a connection_error: a rerun generates the rest
    assert s0["state"] == "failed" and s0["done"] in (4, 6, 8)
    assert s0["failures"] == {} and s0["ok"] == s0["done"]
    assert st["stopped"] == ["0-of-2"]
    assert "EndpointDown" in s0["error"] and "Cannot connect to host" in s0["error"]
    text = status_cli(layout)
    assert "stopped shards:" in text and "0-of-2" in text.split("stopped shards:")[1]

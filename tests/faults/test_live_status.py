"""`rewardprof status` on a live run, as the rollout jobs (`rewardprof rollout`) write it,
against a fake engine whose rate and startup the test sets: each answer takes `LATENCY_S` and
each job's engine check (`GET /models`) `STARTUP_S`, so the time a shard takes is the engine's,
not the machine's. The shards run one after another (one engine at a time, as serve mode on
one machine). Held states land by construction: the fake server's gate holds answers until the
test has looked.

Checked: the whole total (624 = 156 tasks x K=4) before any output; the time in each state;
an ETA within 25 % of the wall time that was left while shards were still to start; the rate
of a killed attempt carried into the next one."""

from __future__ import annotations

import os
import signal
import time

import pytest
import yaml
from harness import shardkit as kit
from harness.live_run import beat, rollout_job, run_dir, status_cli, wait_for

from rewardprof.testing.fake_server import FakeOpenAI
from rewardprof.tools.status import collect

TASKS, K, N = 156, 4, 3  # 624 rollouts, 208 per shard
LATENCY_S = 0.5  # per request of n=K: 2 requests in flight make 16 rollouts/s, 13 s a shard
STARTUP_S = 4.0


@pytest.fixture
def server():
    with FakeOpenAI(kit.answer, latency_s=LATENCY_S, models_latency_s=STARTUP_S) as s:
        yield s


def _shard_row(layout, i: int) -> dict:
    return collect(layout.root)["shards"][i]


def test_status_through_a_run_whose_shards_start_one_after_another(tmp_path, server):
    layout, config = run_dir(tmp_path, server.base_url, TASKS, K, N)

    # nothing has run: the total is the plan's
    st = collect(layout.root)
    assert (st["done"], st["expected"]) == (0, TASKS * K)
    assert [s["state"] for s in st["shards"]] == ["pending"] * N
    assert "0/624 rollouts" in status_cli(layout)

    # shard 0: starting (held in its engine check), then running, then done
    job = rollout_job(layout, config, 0, tmp_path / "logs/0.log")
    wait_for(lambda: beat(layout, 0).get("state") == "starting", "shard 0 starting")
    row = _shard_row(layout, 0)
    assert row["state"] == "starting" and 0 <= row["elapsed_s"] < STARTUP_S + 60
    wait_for(lambda: beat(layout, 0).get("state") == "running", "shard 0 running")
    b = beat(layout, 0)
    row = _shard_row(layout, 0)
    # the time in this state, not the job's: the engine check came before it
    assert row["state"] == "running"
    assert row["elapsed_s"] <= time.time() - b["started_at"] - STARTUP_S + 0.5
    assert b["state_since"] - b["started_at"] >= STARTUP_S
    assert job.wait(timeout=120) == 0
    row = _shard_row(layout, 0)
    assert row["state"] == "done" and row["elapsed_s"] >= STARTUP_S + (TASKS * K / N) / 16 * 0.9

    # shard 1 starting, shard 2 still to start: the ETA counts shard 2's startup and work
    job = rollout_job(layout, config, 1, tmp_path / "logs/1.log")
    wait_for(lambda: beat(layout, 1).get("state") == "starting", "shard 1 starting")
    st = collect(layout.root)
    asked = time.monotonic()
    assert [s["state"] for s in st["shards"]] == ["done", "starting", "pending"]
    assert st["eta_s"] is not None
    assert job.wait(timeout=120) == 0
    job = rollout_job(layout, config, 2, tmp_path / "logs/2.log")
    assert job.wait(timeout=120) == 0
    left = time.monotonic() - asked
    print(f"ETA {st['eta_s']:.1f}s with shards to start; the run took {left:.1f}s more")
    assert abs(st["eta_s"] - left) <= 0.25 * left, (st["eta_s"], left)
    done = collect(layout.root)
    assert (done["done"], done["expected"], done["finished"]) == (TASKS * K, TASKS * K, N)
    assert done["eta_s"] is None or done["eta_s"] == 0


def test_the_rate_of_a_killed_attempt_carries_into_the_next(tmp_path, server):
    layout, config = run_dir(tmp_path, server.base_url, 40, K, 1, progress_interval_s=0.1)
    server.hold_after(6)  # 6 requests of n=4 answered, the rest held
    job = rollout_job(layout, config, 0, tmp_path / "logs/0.log")
    wait_for(lambda: server.gate_held >= 1, "a held request")
    wait_for(lambda: beat(layout, 0).get("collected") == 24, "the heartbeat of 24 rollouts")
    os.kill(job.pid, signal.SIGKILL)
    job.wait(timeout=60)
    killed = collect(layout.root)["shards"][0]  # its heartbeat as the kill left it
    assert killed["rollouts_per_s"] > 0

    # the next attempt, held before its first answer: its rate is the killed attempt's. It
    # samples every 10 s, so its held samples cannot push the killed attempt's out of the
    # window (40 samples) while the status command below starts, however loaded the machine
    slow = config.with_name("run-slow-beat.yaml")
    data = yaml.safe_load(config.read_text())
    data["rollout"]["progress_interval_s"] = 10.0
    slow.write_text(yaml.safe_dump(data))
    server.hold_after(0)
    job = rollout_job(layout, slow, 0, tmp_path / "logs/0.2.log")
    try:
        wait_for(lambda: server.gate_held >= 1, "the next attempt's first request, held")
        row = collect(layout.root)["shards"][0]
        assert row["state"] == "running" and row["done"] == 24 and row["expected"] == 160
        # measured on the killed attempt's samples (the held wait since only lowers it)
        assert 0 < row["rollouts_per_s"] <= killed["rollouts_per_s"] + 1e-9
        assert row["eta"] not in (None, "?")
        assert "0.00 rollouts/s" not in status_cli(layout)
    finally:
        server.hold_after(None)
    assert job.wait(timeout=120) == 0

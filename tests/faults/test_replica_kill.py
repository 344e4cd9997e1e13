"""L2: a rollout job balancing over two engine replicas (separate processes) loses one to
SIGKILL mid-run (issue acceptance: out within 10 s, the run completes, 0 rollouts lost, 0
duplicated, every reward as in an undisturbed run).

By construction: each replica takes at most 2 sequences (engine.replica_capacity, admission 1),
the job runs 8 workers, so replica B gets requests from the start; B answers 2 and then holds
every later request at its gate, so the run cannot finish while B lives. The killer waits until B
holds a request, then SIGKILLs it: those requests' connections die and must be re-sent to A.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
from harness import shardkit as kit
from helpers import wait_for

from rewardprof.engine.host import free_port
from rewardprof.engine.session import Endpoint
from rewardprof.stages.rollout.shard_job import EngineOpener, ShardJob, run_shard
from rewardprof.store.journal import scan_journal

TESTS = Path(__file__).resolve().parents[1]
NUM_TASKS, K = 12, 4


def _replica(*extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port("127.0.0.1")
    argv = [sys.executable, str(TESTS / "harness" / "replica_server.py"), "--port", str(port)]
    proc = subprocess.Popen([*argv, *extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = f"http://127.0.0.1:{port}"
    wait_for(lambda: _answers(root) or proc.poll() is not None, "replica up", 60)
    assert proc.poll() is None, "replica process died at start"
    return proc, root + "/v1"


def _answers(root: str) -> bool:
    try:
        with urllib.request.urlopen(root + "/health", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def _run(tmp: Path, urls: list[str]):
    cfg = kit.make_config(
        urls if len(urls) > 1 else urls[0],
        K,
        rollout={"concurrency": 8, "endpoint_down_s": 60},
        engine={
            "max_n": 1,
            "replica_capacity": 2,
            "replica_admission": 1,
            "health_interval_s": 0.5,
        },
    )
    tasks = kit.make_tasks(tmp, cfg, NUM_TASKS)
    endpoint = Endpoint(urls[0], cfg.model_name, None, identity="endpoint:fake", urls=tuple(urls))
    out = tmp / "out.parquet"
    summary = run_shard(
        ShardJob(cfg, tasks, tmp / "journal", out, "s0of1"), EngineOpener.running(endpoint)
    )
    records = pq.read_table(out).to_pandas().sort_values(["task_index", "rollout_index"])
    assert kit.check_records(records, kit.load_tasks(tasks), cfg) == []
    return summary, records.reset_index(drop=True)


def test_sigkilled_replica_is_taken_out_and_its_requests_resent(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="rewardprof.engine")
    held = tmp_path / "b-holds"
    a, url_a = _replica()
    b, url_b = _replica("--hold-after", "2", "--held-file", str(held))
    killed: dict[str, float] = {}
    stop = threading.Event()

    def killer() -> None:
        while not stop.is_set():
            if held.exists():
                killed["at"] = time.time()
                os.kill(b.pid, signal.SIGKILL)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    try:
        summary, rec = _run(tmp_path / "killed", [url_a, url_b])
    finally:
        stop.set()
        thread.join(10)
        for p in (a, b):
            p.kill()
            p.wait()
    assert "at" in killed, "B never held a request (the run finished without it)"
    # B was out within 10 s of the kill (the log record of taking it out)
    outs = [
        r.created - killed["at"]
        for r in caplog.records
        if url_b.removeprefix("http://") in r.getMessage() and ": out (" in r.getMessage()
    ]
    assert outs and 0 <= min(outs) <= 10, outs
    # the run completed: every rollout ok, none lost
    assert summary["by_status"] == {"ok": NUM_TASKS * K}
    assert len(rec) == NUM_TASKS * K
    # journaled once: one record per (task, rollout) across every journal file
    keys = scan_journal(tmp_path / "killed" / "journal").keys.to_pandas()
    per_pair = keys.groupby(["task_index", "rollout_index"]).size()
    assert len(per_pair) == NUM_TASKS * K and per_pair.max() == 1
    # B's held requests were re-sent at once (a failover is not an attempt with a backoff)
    assert int(held.read_text()) >= 1 and (rec["attempt"] == 1).all()
    # the same rewards and texts (each quotes its seed) as an undisturbed run on one replica
    c, url_c = _replica()
    try:
        _, calm = _run(tmp_path / "calm", [url_c])
    finally:
        c.kill()
        c.wait()
    cols = ["task_index", "rollout_index", "seed", "reward", "completion"]
    assert rec[cols].equals(calm[cols])
    assert rec["reward"].nunique() == 2  # rewards differ by seed: a mix-up would show

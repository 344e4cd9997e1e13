"""L2: the fleet's endpoints file empties mid-run (what `rewardprof fleet` writes on stop) and
its replica dies: the rollout job stops with EndpointDown within rollout.endpoint_down_s + 30 s
instead of waiting for a replica forever, and the rerun, once the file lists a replica again,
finishes with nothing lost and nothing duplicated.

By construction: replica A answers 2 requests and then holds every later one at its gate, so the
run cannot finish on A; once A holds a request the file is emptied and A SIGKILLed. Without the
empty list counting toward endpoint_down_s this run waits for a replica forever.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pyarrow.parquet as pq
import pytest
from harness import shardkit as kit
from test_replica_kill import _replica

from rewardprof.engine.endpoints import write_endpoints
from rewardprof.engine.liveness import CONNECTED_AFTER_S, EndpointDown
from rewardprof.engine.session import Endpoint
from rewardprof.stages.rollout.shard_job import EngineOpener, ShardJob, run_shard
from rewardprof.store.journal import scan_journal

# past CONNECTED_AFTER_S: a request waiting that long for a replica looks connected, which is
# what kept the liveness from ever firing on an empty fleet
NUM_TASKS, K, DOWN_S = 12, 4, CONNECTED_AFTER_S + 3


def _run(tmp, endpoints, url):
    cfg = kit.make_config(
        url,
        K,
        rollout={"concurrency": 4, "endpoint_down_s": DOWN_S},
        engine={"max_n": 1, "replica_capacity": 2, "replica_admission": 1,
                "health_interval_s": 0.3},
    )  # fmt: skip
    tasks = tmp / "tasks.parquet"
    if not tasks.exists():
        tasks = kit.make_tasks(tmp, cfg, NUM_TASKS)
    endpoint = Endpoint(
        url, cfg.model_name, None, identity="fleet:test", urls=(url,), endpoints_file=str(endpoints)
    )
    job = ShardJob(cfg, tasks, tmp / "journal", tmp / "out.parquet", "s0of1")
    return cfg, tasks, run_shard(job, EngineOpener.running(endpoint))


def test_an_emptied_fleet_stops_the_job_and_the_rerun_loses_nothing(tmp_path):
    endpoints, held = tmp_path / "endpoints.json", tmp_path / "a-holds"
    a, url_a = _replica("--hold-after", "2", "--held-file", str(held))
    write_endpoints(endpoints, [url_a])
    emptied: dict[str, float] = {}

    def stop_the_fleet() -> None:
        deadline = time.monotonic() + 120
        while not held.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        write_endpoints(endpoints, [])
        emptied["at"] = time.monotonic()
        os.kill(a.pid, signal.SIGKILL)

    thread = threading.Thread(target=stop_the_fleet, daemon=True)
    thread.start()
    try:
        with pytest.raises(EndpointDown) as err:
            _run(tmp_path, endpoints, url_a)
        stopped = time.monotonic()
    finally:
        thread.join(130)
        a.kill()
        a.wait()
    assert "at" in emptied and held.exists()
    assert stopped - emptied["at"] <= DOWN_S + 30
    assert "no replica listed" in str(err.value)
    before = scan_journal(tmp_path / "journal").keys.to_pandas()
    assert 2 <= len(before) < NUM_TASKS * K  # A's answers journaled, the rest not done
    c, url_c = _replica()
    try:
        write_endpoints(endpoints, [url_c])  # the fleet is back
        cfg, tasks, summary = _run(tmp_path, endpoints, url_c)
    finally:
        c.kill()
        c.wait()
    assert summary["by_status"] == {"ok": NUM_TASKS * K}
    records = pq.read_table(tmp_path / "out.parquet").to_pandas()
    assert kit.check_records(records, kit.load_tasks(tasks), cfg) == []
    keys = scan_journal(tmp_path / "journal").keys.to_pandas()
    per_pair = keys.groupby(["task_index", "rollout_index"]).size()
    assert len(per_pair) == NUM_TASKS * K and per_pair.max() == 1

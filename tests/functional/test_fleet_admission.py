"""L1: with several replicas the rollout job keeps every replica's admission filled, whatever
rollout.concurrency says: workers follow the replicas' capacity, and each replica gets up to
replica_capacity x replica_admission sequences (the replica queues those past its slots), never
more. Against two simulated engines (rewardprof.testing.sim_engine) in this process.

By construction: every sequence takes ~1 s of real time (fixed length, sigma 0) while the job
has all 48 single-sample requests ready at once; at concurrency 2 without the fleet's staffing a
replica would see at most 2, at admission 1 at most its 4 slots.
"""

from __future__ import annotations

import contextlib

import pyarrow.parquet as pq
from harness import shardkit as kit

from rewardprof.engine.session import Endpoint
from rewardprof.stages.rollout.shard_job import EngineOpener, ShardJob, run_shard
from rewardprof.testing.sim_batching import LengthModel
from rewardprof.testing.sim_engine import SimEngine, SimSettings

SLOTS, ADMISSION, NUM_TASKS, K = 4, 3, 6, 8


def test_a_job_fills_each_replica_to_its_admission_and_not_past_it(tmp_path):
    settings = SimSettings(
        model_names=(kit.MODEL,),
        max_num_seqs=SLOTS,
        time_scale=1.0,
        lengths=LengthModel(median=60, sigma=0.0),  # 60 steps of ~16 ms: ~1 s each
    )
    with contextlib.ExitStack() as stack:
        sims = [stack.enter_context(SimEngine(settings)) for _ in range(2)]
        urls = [sim.base_url for sim in sims]
        cfg = kit.make_config(
            urls,
            K,
            rollout={"concurrency": 2, "request_timeout_s": 60},
            engine={"max_n": 1, "replica_capacity": SLOTS, "replica_admission": ADMISSION},
        )
        tasks = kit.make_tasks(tmp_path, cfg, NUM_TASKS)
        endpoint = Endpoint(urls[0], cfg.model_name, identity="endpoint:sim", urls=tuple(urls))
        out = tmp_path / "out.parquet"
        run_shard(
            ShardJob(cfg, tasks, tmp_path / "journal", out, "s0of1"), EngineOpener.running(endpoint)
        )
        stats = [sim.stats() for sim in sims]
    records = pq.read_table(out).to_pandas()
    assert len(records) == NUM_TASKS * K and (records["status"] == "ok").all()
    for s in stats:
        assert s["peak_running"] == SLOTS
        assert 2 * SLOTS <= s["peak_in_system"] <= SLOTS * ADMISSION, s
    assert sum(s["sequences"] for s in stats) == NUM_TASKS * K

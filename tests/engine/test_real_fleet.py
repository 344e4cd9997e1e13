"""L2, real engine: two vLLM CPU replicas (SmolLM2-135M) started as a fleet by `rewardprof
fleet start`, balanced by the rollout client over the fleet's endpoints file, give the same
rollouts (texts and rewards) as one replica, seeded; `rewardprof fleet stop` leaves no server
process. Two engine starts (~55 s each on idle cores) and ~4 GB RSS each: run it alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from engine_helpers import MODEL, make_shard, models_dir, new_mark
from helpers import wait_for

from rewardprof.engine.endpoints import read_endpoints
from rewardprof.engine.host import processes_with_env
from rewardprof.engine.session import engine_session
from rewardprof.manifest.load import validate_config
from rewardprof.stages.rollout.heartbeat import ShardHeartbeat
from rewardprof.stages.rollout.shard_job import EngineOpener, ShardJob, run_shard
from rewardprof.store.layout import FleetLayout, RunLayout

pytestmark = [pytest.mark.engine, pytest.mark.slow]
_ = models_dir  # a fixture (imported to be found)
REWARDPROF = str(Path(sys.executable).parent / "rewardprof")
K = 4


def _rollouts(cfg, shard: Path, out: Path, heartbeat=None) -> pd.DataFrame:
    engine = EngineOpener(cfg.model_name, lambda: engine_session(cfg))
    journal = out.parent / f"{out.stem}-journal"
    run_shard(ShardJob(cfg, shard, journal, out, "s0of1"), engine, heartbeat=heartbeat)
    return pd.read_parquet(out).sort_values(["task_index", "rollout_index"]).reset_index(drop=True)


# two engine starts at once: ~55 s each on idle cores, measured 12 min with other jobs on both
@pytest.mark.timeout(2700)
def test_two_replicas_give_the_rewards_of_one(models_dir, tmp_path):
    data, shard = make_shard(tmp_path, K)
    name, value, needle = new_mark()
    run_dir = tmp_path / "results" / "t"
    endpoints = FleetLayout(RunLayout(run_dir)).endpoints
    engine = {
        "mode": "endpoint",
        "endpoints_file": str(endpoints),
        "model": f"builtin:{MODEL}",
        "models_dir": str(models_dir),
        "return_token_ids": True,
        "serve_env": {name: value},
        "startup_timeout_s": 900,
    }
    data |= {
        "sampling": {"temperature": 1.0, "max_tokens": 48, "seed": 0},
        "engine": engine,
        "fleet": {"replicas": 2, "restarts": 0},
        "rollout": {"concurrency": 4, "verify_workers": 1},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    start = [REWARDPROF, "fleet", "start", "--config", "c.yaml", "--run-dir", str(run_dir)]
    started = subprocess.run(
        [*start, "--wait", "900"], cwd=tmp_path, capture_output=True, text=True
    )
    try:
        assert started.returncode == 0, started.stderr
        wait_for(lambda: len(read_endpoints(endpoints)) == 2, "both replicas ready", 900)
        beat = ShardHeartbeat(RunLayout(tmp_path / "beat"), 0, 1, 3600)
        balanced = _rollouts(validate_config(data), shard, tmp_path / "two.parquet", beat)
        urls = read_endpoints(endpoints)
        one = dict(engine, base_url=urls[0])
        del one["endpoints_file"]
        alone = _rollouts(validate_config(data | {"engine": one}), shard, tmp_path / "one.parquet")
    finally:
        stopped = subprocess.run(
            [REWARDPROF, "fleet", "stop", str(run_dir)], capture_output=True, text=True
        )
    assert stopped.returncode == 0, stopped.stderr
    assert processes_with_env(needle) == [], "vLLM processes outlived the fleet"
    assert balanced["engine"].iloc[0] == f"fleet:{endpoints}"
    # both replicas answered: the two tasks' requests (n=K each) went one to each
    replicas = json.loads(beat.path.read_text())["replicas"]
    assert sorted(r["url"] for r in replicas) == sorted(urls)
    assert all(r["done"] >= 1 and r["errors"] == 0 for r in replicas), replicas
    assert (balanced["status"] == "ok").all() and len(balanced) == len(alone) == 2 * K
    cols = ["task_index", "rollout_index", "seed", "completion", "reward", "completion_tokens"]
    assert balanced[cols].equals(alone[cols])

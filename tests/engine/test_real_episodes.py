"""L2: episodes against the real engine (vLLM CPU + SmolLM2-135M) in serve mode: the rollout
job starts vLLM with its tool-calling flags and rewardprof's ChatML template for tools, runs
NeMo Gym's counter environment, and every episode ends journaled once, scored or failed with a
kind. The small model was not trained for tools and left to itself answers in text, so the
entry asks for tool_choice 'required' (vLLM then constrains each turn to a call): every turn
calls, the counter's outputs go back to vLLM as tool messages, and each episode runs to
max_steps."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from engine_helpers import MODEL, models_dir
from harness.nemo_gym_rows import DATA

from rewardprof.core.kinds import FailureKind
from rewardprof.engine.session import engine_session
from rewardprof.manifest.load import validate_config
from rewardprof.stages import MaterializePaths, ShardPaths, materialize, shard
from rewardprof.stages.rollout.shard_job import EngineOpener, ShardJob, run_shard
from rewardprof.store.shards import ShardPosition

pytestmark = [pytest.mark.engine, pytest.mark.slow]
_ = models_dir  # a fixture (imported to be found)


@pytest.mark.timeout(1800)
def test_counter_episodes_end_to_end_in_serve_mode(models_dir, tmp_path):
    source = tmp_path / "c.jsonl"
    source.write_text((DATA / "example_session_state_mgmt" / "example.jsonl").read_text())
    data = {
        "run": "t",
        "num_shards": 1,
        "entries": [
            {
                "label": "counter",
                "environment": "example_session_state_mgmt",
                "source": str(source),
                "num_repeats": 2,
                "options": {"max_steps": 3, "tool_choice": "required"},
            }
        ],
        "engine": {
            "mode": "serve",
            "model": f"builtin:{MODEL}",
            "models_dir": str(models_dir),
            "tool_call_parser": "hermes",
            "startup_timeout_s": 600,
        },
        "sampling": {"max_tokens": 256, "temperature": 1.0, "seed": 3},
    }
    cfg = validate_config(data)
    tasks = tmp_path / "tasks.parquet"
    materialize.run(cfg, MaterializePaths(tasks=tasks, report=tmp_path / "report.json"))
    shard_file = tmp_path / "shard.parquet"
    shard.run(None, ShardPaths(tasks=tasks, out=shard_file, shard=ShardPosition(0, 1)))
    out = tmp_path / "out.parquet"
    engine = EngineOpener(cfg.model_name, lambda: engine_session(cfg))
    run_shard(ShardJob(cfg, shard_file, tmp_path / "journal", out, "0-of-1"), engine)
    recs = pd.read_parquet(out)
    assert len(recs) == 10 and not recs[["task_index", "rollout_index"]].duplicated().any()
    # vLLM took every turn (tools offered, tool messages sent back): no refused request
    assert set(recs["status"]) <= {"ok", *FailureKind}
    assert not (recs["status"] == FailureKind.REQUEST_ERROR).any(), recs["error"].tolist()
    ok = recs[recs["status"] == "ok"]
    assert len(ok) >= 8, recs[["status", "error"]].to_string()
    for rec in ok.itertuples():
        extras = json.loads(rec.extras)
        episode, trajectory = extras["episode"], extras["trajectory"]
        assert (episode["stop_reason"], episode["steps"]) == ("max_steps", 3), trajectory
        assert episode["tool_calls"] >= 3, episode  # a call every turn
        assert rec.reward in (0.0, 1.0) and rec.completion_tokens > 0
        tool_messages = [m for m in trajectory if m["role"] == "tool"]
        assert len(tool_messages) == episode["tool_calls"]
    calls = sum(json.loads(e)["episode"]["tool_calls"] for e in ok["extras"])
    print(f"\n{len(ok)} episodes ok, {calls} tool calls, rewards {ok['reward'].tolist()}")

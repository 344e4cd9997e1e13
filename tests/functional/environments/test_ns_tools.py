"""ns_tools (L1): NeMo Gym's recorded episodes replayed with NeMo Skills' Python tool run for real
(IPython in the sandbox), the tool's timeouts, cuts and lost sessions, and the verifier against
wrong answers dressed as right ones.

Every recorded tool output comes back byte for byte (the displayed values, the plain traceback
of rollout 3's TypeError, the pretty-printed lists), and every recorded reward."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from harness.episode_replay import matched_cases, recorded_turns, scripted

import rewardprof
from rewardprof.environments import make_environment
from rewardprof.environments.base import RowError
from rewardprof.environments.episode import Episode, run_episode
from rewardprof.environments.nemo_ns_tools import RESTART_WARNING, TOOL
from rewardprof.environments.sandbox import Limits, choose_mechanism


@pytest.mark.slow
def test_recorded_episodes_replay_with_equal_outputs_and_rewards(ctx):
    # no recorded cell timed out: a cell's time limit far above what any took, so a loaded
    # machine cannot turn one into a lost session (one came back lost once under CI load)
    env = make_environment("ns_tools", {"exec_timeout_s": 120})
    cases = matched_cases("ns_tools")
    assert len(cases) == 5
    for k, (task, record) in enumerate(cases):
        turns, recorded = recorded_turns(record["response"]["output"])
        episode = asyncio.run(
            run_episode(scripted(turns, []), env, task, env.prompt(task), 7, ctx, env.limits())
        )
        calls = [r for t in episode.turns for r in t.results]
        assert [r.output for r in calls] == [recorded[r.call.id] for r in calls], k
        assert len(calls) == len(recorded) and episode.stop_reason == "no_call"
        verdict = asyncio.run(env.verify_episode(task, episode, ctx))
        assert (verdict.status, verdict.reward) == ("ok", record["reward"]), verdict


def _run(env, cells):
    state, outputs = env.seed_state({}), []
    for code in cells:
        output, state = env.call(TOOL, {"code": code}, state)
        outputs.append(output)
    return outputs


def test_one_ipython_per_episode_displayed_as_nemo_skills_does():
    env = make_environment("ns_tools")
    out = _run(
        env,
        [
            "x = [(i, -100 * i) for i in range(8)]\nprint('n', len(x))\nx",
            "import sympy as sp\nsp.Symbol('s') * (x[1][1] + 724)",
            "y = 1\nint('a')",
            "y + 1",
        ],
    )
    # a multi-line value's "Out[n]: " line stays as an empty line after the print, as there
    assert out[0] == "n 8\n\n[(0, 0),\n (1, -100),\n (2, -200),\n (3, -300),\n (4, -400),\n" + (
        " (5, -500),\n (6, -600),\n (7, -700)]"
    )
    assert out[1] == "624*s"
    assert out[2] == (
        "Traceback (most recent call last):\n    int('a')\n"
        "ValueError: invalid literal for int() with base 10: 'a'"
    )
    assert out[3] == "2"  # what a failing cell set before its error stays
    assert _run(env, ["x"])[0].endswith("NameError: name 'x' is not defined")  # a new episode


def test_a_cell_past_its_time_is_interrupted_then_killed_and_the_session_lost():
    env = make_environment("ns_tools", {"exec_timeout_s": 1, "max_output_characters": 300})
    out = _run(
        env,
        [
            "a = 5",
            "while True:\n    pass",  # KeyboardInterrupt after 1 s, the state kept
            "a",
            # a cell that swallows the interrupt is killed half a second later
            "while True:\n    try:\n        while True:\n            pass\n"
            "    except KeyboardInterrupt:\n        pass",
            "a",
            "print('y' * 400)",
        ],
    )
    # the traceback names the line the interrupt met (either of the loop's two)
    first, line, last = out[1].split("\n")
    assert (first, last) == ("Traceback (most recent call last):", "KeyboardInterrupt")
    assert line in ("    while True:", "    pass")
    assert out[2] == "5"
    assert out[3] == RESTART_WARNING + "Execution timed out after 1 seconds"
    # the next call warns again (stderr, after the traceback on stdout) and runs in a fresh
    # interpreter, as NeMo Skills' does
    assert out[4].endswith(RESTART_WARNING[:-1]) and "name 'a' is not defined\n" in out[4]
    assert out[5] == "y" * 300 + "<output cut>"


def test_the_models_code_is_contained():
    env = make_environment("ns_tools", {"max_cells": 2})
    out = _run(env, ["b = 2", "import os\nos._exit(3)", "b", "1", "2"])
    assert out[1] == RESTART_WARNING + "connection closed"
    assert out[2].endswith(RESTART_WARNING[:-1]) and "name 'b' is not defined\n" in out[2]
    # the lost session's cells are not run again: two cells since then, the most it may
    assert out[4].startswith("Error: this session ran 2 cells")
    if choose_mechanism(Limits()) == "bubblewrap":  # the project and its sources are not there
        source = str(Path(rewardprof.__file__).parent)
        assert _run(env, [f"import os\nos.path.exists({source!r})"]) == ["False"]


def test_a_row_for_another_verifier_is_refused():
    env = make_environment("ns_tools")
    row = json.loads(
        Path(__file__)
        .parents[2]
        .joinpath("data/nemo_gym/ns_tools/example.jsonl")
        .read_text()
        .splitlines()[0]
    )
    env.check_row(row)
    with pytest.raises(RowError, match="verifier_type 'xlam_fc'"):
        env.check_row({**row, "verifier_type": "xlam_fc"})


def _episode(*messages):
    prompt = [{"role": "user", "content": "Find the sum. Put the answer in \\boxed{}."}]
    return Episode(messages=prompt + [dict(m) for m in messages], prompt_messages=1)


def _said(role, content):
    return {"role": role, "content": content}


@pytest.mark.parametrize(
    ("messages", "reward"),
    [
        ([_said("assistant", "so the sum is \\boxed{70}")], 1.0),
        # math_with_judge joins every assistant text: the last box decides
        ([_said("assistant", "\\boxed{70}"), _said("assistant", "no: \\boxed{71}")], 0.0),
        # the answer printed by the code is the tool's, not the model's
        ([_said("assistant", "see the output"), _said("tool", "\\boxed{70}")], 0.0),
        # a box inside the call's arguments is not said either
        (
            [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": TOOL, "arguments": '{"code": "\\\\boxed{70}"}'},
                        }
                    ],
                },
                _said("tool", "70"),
                _said("assistant", "done"),
            ],
            0.0,
        ),
        ([_said("assistant", "\\boxed{70.5}")], 0.0),
        ([_said("assistant", "\\boxed{7}0")], 0.0),
        ([_said("assistant", "\\boxed{" * 4681)], 0.0),
    ],
)
def test_the_verdict_is_math_with_judges_on_the_models_own_text(ctx, messages, reward):
    env = make_environment("ns_tools")
    verdict = asyncio.run(env.verify_episode({"expected_answer": "70"}, _episode(*messages), ctx))
    assert (verdict.status, verdict.reward) == ("ok", reward), verdict

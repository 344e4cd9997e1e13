"""math_with_code (L1): NeMo Gym's recorded episodes replayed with the Python tool run for real
in the sandbox, the tool's limits, and the verifier against wrong answers dressed as right.

The wheel's recordings were made with an older resource server than the 0.7.0 app.py that
rewardprof follows; every difference is pinned here and explained:
- the recording's tool kept no state between calls (a cell using a name an earlier call defined
  printed nothing); 0.7.0's keeps one interpreter per session, and so does rewardprof. Replayed
  with the state reset at each call, the recorded outputs come back, except two cells of
  rollout 4: one whose scipy RuntimeWarning the old tool answered with nothing, and one whose
  linear solve prints its last digit differently (LAPACK builds round differently);
- rollout 4's answer `\\boxed{\\sqrt{2}}` against `\\(\\sqrt{2}\\)` scored 0 when recorded; 0.7.0
  strips the outer `\\( \\)` before comparing (its comment: without it ~67 % of answers could
  never match), so it scores 1.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from harness.episode_replay import (
    MATH_WITH_CODE_DIFFERS,
    MATH_WITH_CODE_REWARDS,
    differing_outputs,
    matched_cases,
    recorded_turns,
    scripted,
)

import rewardprof
from rewardprof.environments import make_environment
from rewardprof.environments.base import VerifyContext
from rewardprof.environments.episode import run_episode
from rewardprof.environments.nemo_math_with_code import MathWithCodeEnvironment, score
from rewardprof.environments.sandbox import Limits, choose_mechanism

# recorded rollout -> indices of its calls whose outputs differ (see the module's docstring)
STATELESS_DIFFERS = {4: [3, 17]}


class StatelessTool(MathWithCodeEnvironment):
    """The recording's tool: every call in a fresh interpreter."""

    def call(self, name, arguments, state):
        return super().call(name, arguments, self.seed_state({}))


def _replay(env, task, record):
    turns, outputs = recorded_turns(record["response"]["output"])
    ctx = VerifyContext(timeout_s=300)
    episode = asyncio.run(
        run_episode(scripted(turns, []), env, task, env.prompt(task), 7, ctx, env.limits())
    )
    calls = [r for t in episode.turns for r in t.results]
    differs = differing_outputs([(r.call.id, r.output) for r in calls], outputs)
    verdict = asyncio.run(env.verify_episode(task, episode, VerifyContext()))
    return episode, calls, differs, verdict


@pytest.mark.slow
def test_recorded_episodes_replay_with_outputs_and_rewards_as_pinned():
    env = make_environment("math_with_code", {"max_steps": 40})
    stateless = StatelessTool(env.options)
    for k, (task, record) in enumerate(matched_cases("math_with_code")):
        episode, calls, differs, verdict = _replay(env, task, record)
        assert verdict.status == "ok" and verdict.reward == MATH_WITH_CODE_REWARDS[k], (
            k,
            verdict.extras,
        )
        assert differs == MATH_WITH_CODE_DIFFERS.get(k, []), k
        assert episode.stop_reason == "no_call"
        for r in calls:  # NeMo Gym 0.7.0's answer, compact as FastAPI sends it
            assert list(json.loads(r.output)) == [
                "success",
                "stdout",
                "stderr",
                "error_message",
                "result",
            ]
            assert ", " not in r.output[:12]
        assert stateless.call_timeout_s() == env.call_timeout_s()
        _, _, differs, _ = _replay(stateless, task, record)
        assert differs == STATELESS_DIFFERS.get(k, []), k


def _run(env, cells):
    state, outputs = env.seed_state({}), []
    for code in cells:
        output, state = env.call("execute_python", {"code": code}, state)
        outputs.append(json.loads(output))
    return outputs


def test_one_interpreter_per_episode_with_nemo_gyms_builtins_and_packages():
    env = make_environment("math_with_code")
    a = _run(env, ["x = np.sqrt(16)\nprint(x)\nx * 2", "print(x + 1)", "round(x)"])
    assert (a[0]["stdout"], a[0]["result"], a[1]["stdout"]) == ("4.0\n", "8.0", "5.0\n")
    assert a[2] == {
        "success": False,
        "stdout": "",
        "stderr": "",
        "error_message": "name 'round' is not defined",  # not among its builtins
        "result": None,
    }
    # another episode starts empty; the standard library and scipy/pandas import, nothing else
    b = _run(env, ["print(x)", "import math\nmath.gcd(12, 18)", "import sympy", "pd.__name__"])
    assert b[0]["error_message"] == "name 'x' is not defined"
    assert b[1]["result"] == "6"
    assert b[2]["error_message"] == "No module named 'sympy'"
    assert b[3]["result"] == "pandas"


def test_the_models_code_is_bounded_and_contained():
    env = make_environment(
        "math_with_code", {"max_execution_time": 1, "max_cells": 3, "max_tool_output_chars": 100}
    )
    t0 = time.monotonic()
    out = _run(
        env,
        [
            "while True:\n    pass",  # SIGALRM after max_execution_time
            "print('y' * 1000)",
            "import os\nos._exit(3)",
            "print('a fourth cell')",
        ],
    )
    assert out[0]["error_message"] == "code timed-out"
    assert (
        out[1]["stdout"].startswith("y" * 100)
        and "characters cut by rewardprof" in out[1]["stdout"]
    )
    assert out[2]["success"] is False and "without an answer" in out[2]["error_message"]
    assert out[3]["error_message"].startswith("this session ran 3 cells")
    # the first cell re-runs in later calls: each pays its own alarm, not more
    assert time.monotonic() - t0 < 60
    if choose_mechanism(Limits()) == "bubblewrap":  # the project and its sources are not there
        source = str(Path(rewardprof.__file__).parent)
        seen = _run(make_environment("math_with_code"), [f"import os\nos.path.exists({source!r})"])
        assert seen[0]["result"] == "False"


@pytest.mark.parametrize(
    ("messages", "expected", "reward"),
    [
        # the last assistant message with a box decides, not an earlier one
        ([("assistant", "\\boxed{3}"), ("assistant", "so \\boxed{4}")], "3", 0.0),
        ([("assistant", "\\boxed{4}"), ("assistant", "no box here")], "4", 1.0),
        # an unbalanced box is no answer; the tool's stdout is read only without any box
        ([("assistant", "\\boxed{3"), ("tool", '{"stdout": "\\\\boxed{3}"}')], "3", 1.0),
        ([("assistant", "\\boxed{2}"), ("tool", '{"stdout": "\\\\boxed{3}"}')], "3", 0.0),
        # numbers within 1e-6 relative, as NeMo Gym; not a word for a number
        ([("assistant", "\\boxed{3.0000001}")], "3", 1.0),
        ([("assistant", "\\boxed{3.01}")], "3", 0.0),
        ([("assistant", "\\boxed{three}")], "3", 0.0),
        ([("assistant", "\\boxed{inf}")], "infinity", 0.0),
        ([("assistant", "\\boxed{\\frac{1}{2}}")], "\\(\\frac{1}{2}\\)", 1.0),
        ([("assistant", "\\boxed{" * 4681)], "3", 0.0),
    ],
)
def test_the_verifier_reads_the_last_boxed_answer(messages, expected, reward):
    got, extras = score([{"role": r, "content": c} for r, c in messages], expected)
    assert got == reward, extras

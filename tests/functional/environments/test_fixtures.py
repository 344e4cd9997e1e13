"""L1: every built-in environment against checked-in NeMo Gym rows with known rewards.

Each tests/data/environments/<env>.jsonl line is one case: a NeMo Gym row, a completion and the
expected reward/status (and a subset of the verifier extras; optional environment `options`;
for llm_judge the fake judge's reply). The first two cases of every file
are the two-row fixture: the same task answered right (reward 1) and wrong (reward 0).
Environments that act are proved on NeMo Gym's own recorded rollouts instead
(tests/data/nemo_gym/<env>/example_rollouts.jsonl, replayed in tests/unit/environments).
"""

from __future__ import annotations

import pytest
from harness.env_helpers import DATA, FakeJudge, load_cases, run

from rewardprof.environments import BUILTIN, get_environment_class, make_environment
from rewardprof.environments.acting import ActingEnvironment

ENVS = ["math", "mcq", "reasoning_gym", "code", "instruction_following", "llm_judge"]
NEMO_GYM = DATA.parent / "nemo_gym"
CASES = [(env, c) for env in ENVS for c in load_cases(env)]


REMOTE_REPLAYS = {"nemo_gym": ("example_session_state_mgmt", "example_multi_step")}


def test_every_builtin_has_a_fixture_file():
    acting = sorted(n for n in BUILTIN if issubclass(get_environment_class(n), ActingEnvironment))
    assert sorted(set(BUILTIN) - set(acting)) == sorted(ENVS)
    for env in ENVS:
        assert (DATA / f"{env}.jsonl").exists(), env
    # nemo_gym runs NeMo Gym's own servers: it replays their recordings
    # (test_nemo_gym_server.py), the counter's and multi_step's
    for env in acting:
        for recorded in REMOTE_REPLAYS.get(env, (env,)):
            assert (NEMO_GYM / recorded / "example_rollouts.jsonl").exists(), env


@pytest.mark.parametrize("env", ENVS)
def test_two_row_fixture(env):
    first, second = load_cases(env)[:2]
    assert (first["case"], second["case"]) == ("accepted", "rejected")
    assert first["row"] == second["row"], "the two-row fixture answers one task twice"
    assert (first["expected"]["reward"], second["expected"]["reward"]) == (1.0, 0.0)


async def _verify(env_name: str, case: dict, ctx) -> object:
    options = case.get("options", {})
    if env_name == "llm_judge":
        judge = FakeJudge(default=case["judge_reply"])
        async with judge.serving():
            env = make_environment(
                env_name, {**options, "base_url": judge.base_url, "model": "judge"}
            )
            try:
                verdict = await env.verify(case["row"], case["completion"], ctx)
            finally:
                await env.aclose()
        assert len(judge.requests) == 1
        assert case["completion"] in judge.requests[0]["messages"][0]["content"]
        return verdict
    env = make_environment(env_name, options)
    return await env.verify(case["row"], case["completion"], ctx)


@pytest.mark.parametrize(("env_name", "case"), CASES, ids=[f"{e}-{c['case']}" for e, c in CASES])
def test_case(env_name, case, ctx):
    unused_judge = {"base_url": "http://127.0.0.1:9/v1", "model": "judge"}
    env = make_environment(env_name, unused_judge if env_name == "llm_judge" else None)
    env.check_row(case["row"])  # the checked-in row is valid for its environment
    messages = env.prompt(case["row"])
    assert messages and messages[-1]["role"] == "user" and messages[-1]["content"]
    verdict = run(_verify(env_name, case, ctx))
    want = case["expected"]
    assert verdict.status == want["status"], (verdict.status, verdict.detail, verdict.extras)
    assert verdict.reward == want["reward"], (verdict.reward, verdict.extras)
    if want["status"] != "ok":
        assert verdict.detail, "a failure always says why"
    for key, value in want.get("extras", {}).items():
        assert verdict.extras.get(key) == value, (key, verdict.extras)

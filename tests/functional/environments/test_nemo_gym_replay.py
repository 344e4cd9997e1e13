"""L1: each recorded response of NeMo Gym's example_rollouts.jsonl replays to the reward NeMo Gym
recorded (`library_reward` for the math environments: the judge is not part of this layer), in
a real worker pool (the rows themselves load in L0: test_nemo_gym_conformance.py). 24 of the
25 do; one cannot, and the test pins what it gives instead (DEVIATIONS)."""

from __future__ import annotations

import pytest
from harness.env_helpers import run
from harness.nemo_gym_rows import ENVS, OPTIONS, rows, task_row
from helpers import require_piece

from rewardprof.environments import make_environment
from rewardprof.environments.instruction_following.checks import (
    PUNKT,
    STOPWORDS,
    TAGGER,
    nltk_installed,
)


def _completion(record: dict) -> str:
    """The text NeMo Gym verified: the last output message's first text part."""
    messages = [o for o in record["response"]["output"] if o.get("type") == "message"]
    return messages[-1]["content"][0]["text"] if messages else ""


def _recorded(record: dict) -> float:
    return record.get("library_reward", record["reward"])


@pytest.fixture(scope="module", autouse=True)
def nltk_data():
    missing = [r for r in (PUNKT, STOPWORDS, TAGGER) if not nltk_installed(r)]
    require_piece(f"NLTK data {missing}", not missing, "run `rewardprof install-nltk-data`")


def _mcqa_2(verdict) -> None:
    # The box reads "C: An individual ...": NeMo Gym's current strict_single_letter_boxed
    # takes "C" (a letter followed by ':'), as rewardprof does; the recorded 0.0 (extracted
    # None) came from its older code, which took a lone letter only.
    assert (verdict.reward, verdict.extras["extracted"]) == (1.0, "C")


DEVIATIONS = {("mcqa", 2): _mcqa_2}
REPLAY = [(env, i) for env in ENVS for i in range(len(rows(env, "example_rollouts.jsonl")))]


@pytest.mark.parametrize(("env", "i"), REPLAY)
def test_recorded_response_scores_as_nemo_gym_recorded(env, i, ctx):
    record = rows(env, "example_rollouts.jsonl")[i]
    environment = make_environment(env, OPTIONS.get(env))
    verdict = run(environment.verify(task_row(record), _completion(record), ctx))
    if (env, i) in DEVIATIONS:
        DEVIATIONS[env, i](verdict)
        return
    assert verdict.status == "ok", verdict.detail
    assert verdict.reward == _recorded(record), verdict.extras
    if env in ("instruction_following", "ifbench"):
        followed = record["follow_instruction_list"]
        got = verdict.extras["followed"]
        assert [g for g, f in zip(got, followed, strict=True) if g is not None] == [
            f for g, f in zip(got, followed, strict=True) if g is not None
        ]

"""NeMo Gym's `xlam_fc`: function calling judged by the calls alone.

The row's tools have no implementation (NeMo Gym's resource server has no endpoint for them,
so every call is answered with FastAPI's `{"detail":"Not Found"}`, and so it is here); the
reward is 1 when the episode's calls match the row's `expected_answers` one to one: same name,
and every expected argument present with the expected value (extra arguments allowed), with as
many calls as expected.
"""

from __future__ import annotations

import json
from typing import Any

from rewardprof.environments.acting import NOT_FOUND_OUTPUT, ActingEnvironment, Episode
from rewardprof.environments.base import Verdict, VerifyContext
from rewardprof.environments.options import EpisodeOptions


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def _matches(predicted: dict[str, Any], expected: dict[str, Any]) -> bool:
    if predicted.get("name") != expected.get("name"):
        return False
    got, want = _arguments(predicted.get("arguments")), _arguments(expected.get("arguments"))
    return all(key in got and got[key] == value for key, value in want.items())


def score_calls(
    predicted: list[dict[str, Any]], expected: list[dict[str, Any]]
) -> tuple[float, dict[str, Any]]:
    """NeMo Gym's rule: each expected call matched by a distinct predicted one, in order of
    the expected calls; reward 1 only when all match and nothing more was called."""
    used: set[int] = set()
    correct = 0
    for want in expected:
        hit = next(
            (i for i, p in enumerate(predicted) if i not in used and _matches(p, want)), None
        )
        if hit is not None:
            used.add(hit)
            correct += 1
    if not expected:
        reward = float(not predicted)
    else:
        reward = float(correct == len(expected) == len(predicted))
    return reward, {
        "num_expected": len(expected),
        "num_predicted": len(predicted),
        "num_correct": correct,
        "predicted_calls": predicted,
    }


class XlamFcEnvironment(ActingEnvironment[EpisodeOptions]):
    name = "xlam_fc"
    required_fields = ("expected_answers",)

    def call(
        self, name: str, arguments: dict[str, Any], state: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        return NOT_FOUND_OUTPUT, state  # no tool of xlam_fc has an implementation

    async def verify_episode(
        self, row: dict[str, Any], episode: Episode, ctx: VerifyContext
    ) -> Verdict:
        predicted = [{"name": c.name, "arguments": _arguments(c.arguments)} for c in episode.calls]
        reward, extras = await ctx.run_in_pool(score_calls, predicted, row["expected_answers"])
        return Verdict(reward=reward, extras=extras)

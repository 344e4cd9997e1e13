"""NeMo Gym's `example_multi_step`: look up a value per synonym, then report them in order.

Tools as NeMo Gym's resource server has them: `get_synonym_value(synonym)` answers the sum of
the synonym's character code points; `extract_synonym_values(synonym_values)` takes the
model's answer. The reward is 1 when the last `extract_synonym_values` call lists exactly the
row's `expected_synonym_values` in order. One deviation: where NeMo Gym's verifier fails on
that call's arguments not being JSON, this scores the episode 0 (the model's own mistake).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from rewardprof.environments.acting import ActingEnvironment, Episode, parse_arguments
from rewardprof.environments.base import Verdict, VerifyContext
from rewardprof.environments.options import EpisodeOptions


def _ints(value: Any, key: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise ValueError(f"{key}: expected a list of integers")
    return value


def score_synonym_values(
    reported: list[Any] | None, expected: list[int], label: str, label_value: int
) -> tuple[float, dict[str, Any]]:
    """The reward and NeMo Gym's extras for the values the model reported last."""
    actual = reported if isinstance(reported, list) else []
    accuracy = actual == expected
    overlap = len({json.dumps(v) for v in actual} & {json.dumps(v) for v in expected})
    set_overlap = overlap / len(expected) if expected else float(not actual)
    return float(accuracy), {
        "parsed_synonym_values": actual,
        "accuracy": accuracy,
        "set_overlap": set_overlap,
        "original_term_minefield_hit": label in actual or label_value in actual,
        "order_instruction_following_failure": not accuracy and set_overlap == 1.0,
    }


class MultiStepEnvironment(ActingEnvironment[EpisodeOptions]):
    name = "example_multi_step"
    required_fields = ("expected_synonym_values", "minefield_label", "minefield_label_value")
    concurrent_calls: ClassVar[bool] = True  # the tools keep no state

    def call(
        self, name: str, arguments: dict[str, Any], state: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        if name == "get_synonym_value":
            synonym = arguments.get("synonym")
            if not isinstance(synonym, str):
                raise ValueError("synonym: expected a string")
            return json.dumps({"synonym_value": sum(map(ord, synonym))}), state
        if name == "extract_synonym_values":
            _ints(arguments.get("synonym_values"), "synonym_values")
            return json.dumps({"success": True}), state
        raise KeyError(name)

    async def verify_episode(
        self, row: dict[str, Any], episode: Episode, ctx: VerifyContext
    ) -> Verdict:
        reported = None
        for call in reversed(episode.calls):
            if call.name == "extract_synonym_values":
                reported = (parse_arguments(call) or {}).get("synonym_values")
                break
        reward, extras = await ctx.run_in_pool(
            score_synonym_values,
            reported,
            row["expected_synonym_values"],
            row["minefield_label"],
            row["minefield_label_value"],
        )
        return Verdict(reward=reward, extras=extras)

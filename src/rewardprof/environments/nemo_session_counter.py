"""NeMo Gym's `example_session_state_mgmt`: a counter kept per episode.

Each episode starts its own counter at the row's `initial_count` (what NeMo Gym's
`/seed_session` does per session); `increment_counter(count)` adds to it,
`get_counter_value()` reads it; the reward is 1 when the counter ends at `expected_count`.
"""

from __future__ import annotations

import json
from typing import Any

from rewardprof.environments.acting import ActingEnvironment, Episode
from rewardprof.environments.base import Verdict, VerifyContext
from rewardprof.environments.options import EpisodeOptions


def _integer(value: Any, key: str) -> int:
    # pydantic's lax int, as the resource server validates: an int, or a string of one
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{key}: expected an integer")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{key}: expected an integer") from None


def counter_reward(count: int, expected: int) -> float:
    return float(count == expected)


class SessionCounterEnvironment(ActingEnvironment[EpisodeOptions]):
    name = "example_session_state_mgmt"
    required_fields = ("expected_count", "initial_count")

    def seed_state(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"count": int(row["initial_count"])}

    def call(
        self, name: str, arguments: dict[str, Any], state: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        if name == "increment_counter":
            count = state["count"] + _integer(arguments.get("count"), "count")
            return json.dumps({"success": True}), {**state, "count": count}
        if name == "get_counter_value":
            return json.dumps({"count": state["count"]}), state
        raise KeyError(name)

    async def verify_episode(
        self, row: dict[str, Any], episode: Episode, ctx: VerifyContext
    ) -> Verdict:
        count = episode.state["count"]
        reward = await ctx.run_in_pool(counter_reward, count, int(row["expected_count"]))
        return Verdict(reward=reward, extras={"final_count": count})

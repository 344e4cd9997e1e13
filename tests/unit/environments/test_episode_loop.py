"""The agent loop's rules (L0, in process, scripted engine): how an episode ends, what the
model's own mistakes become, what a broken tool becomes, and the bounds."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any, ClassVar

import pytest

from rewardprof.environments import make_environment
from rewardprof.environments.acting import (
    NOT_FOUND_OUTPUT,
    ActingEnvironment,
    ToolCall,
    ToolFailure,
    chat_tools,
)
from rewardprof.environments.base import RowError, VerifyContext
from rewardprof.environments.episode import (
    ChatReply,
    EpisodeFailure,
    EpisodeLimits,
    run_episode,
    turn_seed,
)
from rewardprof.environments.options import EnvironmentOptions

COUNTER_ROW = {
    "responses_create_params": {
        "input": [{"role": "user", "content": "add 2 then add 3 then get the count"}],
        "tools": [
            {"type": "function", "name": "increment_counter", "parameters": {"type": "object"}},
            {"type": "function", "name": "get_counter_value", "parameters": {"type": "object"}},
        ],
    },
    "initial_count": 1,
    "expected_count": 6,
}


def call(name: str, arguments: Any, i: int = 0) -> ToolCall:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return ToolCall(f"call_{name}_{i}", name, text)


def script(*turns: ChatReply, seeds: list[int] | None = None):
    queue = list(turns)

    async def chat(messages, tools, seed):
        if seeds is not None:
            seeds.append(seed)
        return queue.pop(0) if queue else ChatReply(content="done")

    return chat


def run(env, row, chat, limits=None, seed=3):
    limits = limits or EpisodeLimits()
    return asyncio.run(run_episode(chat, env, row, env.prompt(row), seed, VerifyContext(), limits))


def verdict_of(env, row, episode):
    return asyncio.run(env.verify_episode(row, episode, VerifyContext()))


def test_calls_of_one_turn_on_a_counter_run_in_order_and_each_episode_has_its_own_state():
    env = make_environment("example_session_state_mgmt")
    turns = [
        ChatReply(
            None,
            [
                call("increment_counter", {"count": 2}, 0),
                call("increment_counter", {"count": 3}, 1),
            ],
        ),
        ChatReply(None, [call("get_counter_value", {})]),
        ChatReply("6"),
    ]
    first = run(env, COUNTER_ROW, script(*turns))
    second = run(env, COUNTER_ROW, script(*turns))
    assert first.turns[1].results[0].output == json.dumps({"count": 6})
    assert second.state == {"count": 6}  # not 11: the state is seeded per episode
    assert verdict_of(env, COUNTER_ROW, first).reward == 1.0


def test_an_unknown_tool_and_arguments_that_are_not_json_are_the_models_mistakes():
    env = make_environment("example_session_state_mgmt")
    episode = run(
        env,
        COUNTER_ROW,
        script(
            ChatReply(
                None, [call("delete_everything", {}), call("increment_counter", "{count: 5")]
            ),
            ChatReply(None, [call("increment_counter", {"count": "five"})]),
            ChatReply("I give up"),
        ),
    )
    errors = [r.error for t in episode.turns for r in t.results]
    assert errors == ["unknown_tool", "bad_arguments", "bad_arguments"]
    assert episode.turns[0].results[0].output == NOT_FOUND_OUTPUT
    assert episode.summary()["tool_errors"] == 3
    verdict = verdict_of(env, COUNTER_ROW, episode)
    assert verdict.status == "ok" and verdict.reward == 0.0  # scored, the counter never moved


def test_an_episode_that_keeps_calling_stops_at_max_steps_and_is_scored():
    env = make_environment("example_session_state_mgmt")
    forever = [ChatReply(None, [call("get_counter_value", {}, i)]) for i in range(10)]
    episode = run(env, COUNTER_ROW, script(*forever), EpisodeLimits(max_steps=4))
    assert episode.stop_reason == "max_steps" and len(episode.turns) == 4
    assert verdict_of(env, COUNTER_ROW, episode).status == "ok"


def test_the_token_budget_counts_every_turn():
    env = make_environment("example_session_state_mgmt")
    turns = [
        ChatReply(None, [call("get_counter_value", {}, i)], completion_tokens=40) for i in range(5)
    ]
    episode = run(env, COUNTER_ROW, script(*turns), EpisodeLimits(max_total_tokens=100))
    assert episode.stop_reason == "token_budget" and len(episode.turns) == 3
    assert episode.summary()["completion_tokens"] == 120


def test_a_truncated_turn_without_calls_says_length():
    env = make_environment("example_session_state_mgmt")
    episode = run(env, COUNTER_ROW, script(ChatReply("add 2 and th", finish_reason="length")))
    assert episode.stop_reason == "length"


class BrokenTools(ActingEnvironment[EnvironmentOptions]):
    name = "broken_tools"
    concurrent_calls: ClassVar[bool] = True

    def call(self, name, arguments, state):
        if name == "increment_counter":
            raise ToolFailure("database unreachable")
        return "x" * 50_000, state


def test_a_tool_that_breaks_ends_the_episode_as_tool_error_never_a_reward():
    with pytest.raises(EpisodeFailure) as failure:
        run(
            BrokenTools(),
            COUNTER_ROW,
            script(ChatReply(None, [call("increment_counter", {"count": 1})])),
        )
    assert failure.value.kind == "tool_error" and "database unreachable" in str(failure.value)


def test_a_tool_output_is_cut_before_the_next_prompt_and_the_trajectory_is_bounded():
    limits = EpisodeLimits(max_tool_output_chars=1_000, max_trajectory_chars=3_000)
    chat = script(*[ChatReply(None, [call("get_counter_value", {}, i)]) for i in range(5)])
    with pytest.raises(EpisodeFailure) as failure:
        run(BrokenTools(), COUNTER_ROW, chat, limits)
    assert failure.value.kind == "trajectory_too_large"
    episode = run(
        BrokenTools(),
        COUNTER_ROW,
        script(ChatReply(None, [call("get_counter_value", {})])),
        EpisodeLimits(max_tool_output_chars=1_000),
    )
    output = episode.messages[-2]["content"]
    assert output.startswith("x" * 1_000) and "49000 characters cut" in output


class SlowTools(ActingEnvironment[EnvironmentOptions]):
    """Each call waits until two calls are inside at once: calls of one turn must overlap."""

    name = "slow_tools"
    concurrent_calls: ClassVar[bool] = True
    barrier = threading.Barrier(2, timeout=10)

    def call(self, name, arguments, state):
        self.barrier.wait()
        return "ok", state


def test_the_calls_of_one_turn_run_at_the_same_time_where_they_share_no_state():
    calls = [call("get_counter_value", {}, 0), call("get_counter_value", {}, 1)]
    episode = run(SlowTools(), COUNTER_ROW, script(ChatReply(None, calls)))
    assert [r.output for r in episode.turns[0].results] == ["ok", "ok"]


def test_seeds_per_turn_are_a_function_of_the_rollout_seed_and_the_turn():
    env = make_environment("example_session_state_mgmt")
    seen: list[list[int]] = [[], []]
    for s in seen:
        turns = [ChatReply(None, [call("get_counter_value", {}, i)]) for i in range(3)]
        run(env, COUNTER_ROW, script(*turns, seeds=s), seed=11)
    assert seen[0] == seen[1] == [turn_seed(11, t) for t in range(4)]
    assert seen[0][0] == 11 and len(set(seen[0])) == 4
    assert all(0 <= s < 2**63 for s in seen[0])


def test_the_tool_messages_carry_the_call_ids_as_chat_completions_want():
    env = make_environment("example_session_state_mgmt")
    episode = run(
        env, COUNTER_ROW, script(ChatReply("let me look", [call("get_counter_value", {})]))
    )
    assistant, tool = episode.messages[-3], episode.messages[-2]
    assert assistant["tool_calls"][0]["id"] == tool["tool_call_id"] == "call_get_counter_value_0"
    assert assistant["tool_calls"][0]["function"]["name"] == "get_counter_value"


def test_responses_api_tools_become_chat_tools_and_bad_ones_are_refused():
    tools = chat_tools(COUNTER_ROW["responses_create_params"]["tools"])
    assert tools[0] == {
        "type": "function",
        "function": {
            "name": "increment_counter",
            "description": "",
            "parameters": {"type": "object"},
        },
    }
    with pytest.raises(RowError, match=r"tools\[0\]: no name"):
        chat_tools([{"type": "function"}])
    with pytest.raises(RowError, match="no tools"):
        make_environment("example_session_state_mgmt").check_row(
            {**COUNTER_ROW, "responses_create_params": {"input": "hi"}}
        )


def test_an_acting_environment_refuses_to_score_one_completion():
    env = make_environment("example_multi_step")
    verdict = asyncio.run(env.verify({}, "[1, 2]", VerifyContext()))
    assert verdict.status == "verifier_error" and verdict.reward is None

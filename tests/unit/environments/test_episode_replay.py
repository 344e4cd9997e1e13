"""NeMo Gym's recorded multi-turn rollouts replayed through rewardprof's agent loop (L0, in
process): a scripted engine serves each recorded model turn, rewardprof runs the tools itself,
and the tool outputs and the reward must equal the recorded ones."""

from __future__ import annotations

import asyncio
import json

import pytest
from harness.episode_replay import (
    derived_counter_rows,
    matched_cases,
    recorded_turns,
    scripted,
)
from harness.nemo_gym_rows import rows, task_row

from rewardprof.environments import make_environment
from rewardprof.environments.base import VerifyContext
from rewardprof.environments.episode import ChatReply, run_episode


def session_cases() -> list[tuple[dict, dict]]:
    records = rows("example_session_state_mgmt", "example_rollouts.jsonl")
    return list(zip(derived_counter_rows(records), records, strict=True))


def replay(env_name: str, task: dict, record: dict):
    env = make_environment(env_name)
    env.check_row(task)
    turns, outputs = recorded_turns(record["response"]["output"])
    seeds: list[int] = []
    episode = asyncio.run(
        run_episode(
            scripted(turns, seeds), env, task, env.prompt(task), 7, VerifyContext(), env.limits()
        )
    )
    verdict = asyncio.run(env.verify_episode(task, episode, VerifyContext()))
    return episode, verdict, outputs, seeds


@pytest.mark.parametrize(
    ("env_name", "i"),
    [("example_multi_step", i) for i in range(5)]
    + [("example_session_state_mgmt", i) for i in range(5)]
    + [("xlam_fc", i) for i in range(5)],
)
def test_recorded_rollout_replays_with_its_tool_outputs_and_reward(env_name, i):
    cases = session_cases() if env_name == "example_session_state_mgmt" else matched_cases(env_name)
    task, record = cases[i]
    episode, verdict, outputs, seeds = replay(env_name, task, record)
    ran = {r.call.id: r.output for t in episode.turns for r in t.results}
    assert ran == outputs
    assert verdict.status == "ok"
    assert verdict.reward == record["reward"]
    assert episode.stop_reason == "no_call"
    assert len(set(seeds)) == len(seeds) and seeds[0] == 7  # a seed per turn
    for key in (
        "parsed_synonym_values",
        "accuracy",
        "set_overlap",
        "num_expected",
        "num_predicted",
        "num_correct",
        "predicted_calls",
    ):
        if key in record:
            assert verdict.extras[key] == record[key]


def test_a_wrong_order_of_synonym_values_scores_zero_and_says_why():
    task, record = matched_cases("example_multi_step")[0]
    items = record["response"]["output"]
    swapped = []
    for item in items:
        if item["type"] == "function_call" and item["name"] == "extract_synonym_values":
            values = json.loads(item["arguments"])["synonym_values"]
            item = {**item, "arguments": json.dumps({"synonym_values": values[::-1]})}
        swapped.append(item)
    episode, verdict, _, _ = replay(
        "example_multi_step", task, {**record, "response": {"output": swapped}}
    )
    assert verdict.reward == 0.0
    assert verdict.extras["order_instruction_following_failure"] is True


def test_a_counter_left_one_off_scores_zero():
    task, record = session_cases()[0]
    episode, verdict, _, _ = replay(
        "example_session_state_mgmt", {**task, "expected_count": task["expected_count"] + 1}, record
    )
    assert verdict.reward == 0.0 and verdict.extras["final_count"] == task["expected_count"]


def test_xlam_fc_scores_a_missing_argument_and_an_extra_call_zero():
    task, record = matched_cases("xlam_fc")[0]  # one expected call, matched when recorded
    items = record["response"]["output"]
    call = next(i for i in items if i["type"] == "function_call")
    answer = [i for i in items if i["type"] == "message"][-1]

    def turn(*calls):  # the calls, the agent's outputs of them, then the model's last answer
        done = [
            {"type": "function_call_output", "call_id": c["call_id"], "output": ""} for c in calls
        ]
        return {"output": [*calls, *done, answer]}

    wrong = {**call, "arguments": "{}"}
    _, verdict, _, _ = replay("xlam_fc", task, {**record, "response": turn(wrong)})
    assert verdict.reward == 0.0 and verdict.extras["num_correct"] == 0
    extra = {**call, "call_id": "call_extra"}
    _, verdict, _, _ = replay("xlam_fc", task, {**record, "response": turn(call, extra)})
    assert verdict.reward == 0.0 and verdict.extras["num_correct"] == 1
    _, verdict, _, _ = replay("xlam_fc", task, {**record, "response": turn(call)})
    assert verdict.reward == 1.0


SINGLE_STEP = "single_step_tool_use_with_argument_comparison"


@pytest.mark.parametrize("i", range(5))
def test_single_step_recorded_responses_score_as_recorded(i):
    """One turn, judged as its action: 2 messages expected and written, 1 call matched, 2 calls
    expected where the model only wrote (0). The recorded category is NeMo Gym's reason."""
    record = rows(SINGLE_STEP, "example_rollouts.jsonl")[i]
    episode, verdict, outputs, seeds = replay(SINGLE_STEP, task_row(record), record)
    assert len(episode.turns) == 1 and seeds == [7]
    assert verdict.status == "ok"
    assert (verdict.reward, verdict.extras["category"]) == (record["reward"], record["category"])


def _single_step(expected: dict, reply: ChatReply):
    env = make_environment(SINGLE_STEP)
    record = rows(SINGLE_STEP, "example_rollouts.jsonl")[1]
    task = {**task_row(record), "expected_action": expected}
    episode = asyncio.run(
        run_episode(
            scripted([reply], []), env, task, env.prompt(task), 0, VerifyContext(), env.limits()
        )
    )
    return asyncio.run(env.verify_episode(task, episode, VerifyContext()))


def test_single_step_near_misses_score_zero_with_their_reason():
    from rewardprof.environments.acting import ToolCall

    want = {
        "type": "function_call",
        "name": "find",
        "arguments": '{"q": "red shoes size 9", "n": 2}',
    }

    def call(args: str, name: str = "find") -> ChatReply:
        return ChatReply(content="calling", tool_calls=[ToolCall("c1", name, args)])

    cases = {
        '{"q": "red shoes size 9", "n": 2}': (1.0, "matches"),
        '{"q": "SIZE 9 red shoes", "n": 2}': (1.0, "matches"),  # word counts, any case
        '{"q": "blue boots", "n": 2}': (0.0, "different than the expected value"),
        '{"q": "red shoes size 9", "n": "2"}': (0.0, "type of an argument"),
        '{"q": "red shoes size 9"}': (0.0, "keys in an object"),
        '{"q": "red shoes size 9", "n": 2': (0.0, "decoding the arguments"),
    }
    for args, (reward, why) in cases.items():
        verdict = _single_step(want, call(args))
        assert verdict.reward == reward and why in verdict.extras["category"], args
    verdict = _single_step(want, call('{"q": "red shoes size 9", "n": 2}', name="search"))
    assert verdict.reward == 0.0 and "not the expected tool" in verdict.extras["category"]
    verdict = _single_step(want, ChatReply(content="Which size?", tool_calls=[]))
    assert verdict.reward == 0.0 and "No tool call was found" in verdict.extras["category"]
    verdict = _single_step({"type": "message", "content": "hi"}, call("{}"))
    assert verdict.reward == 0.0 and "chat message was expected" in verdict.extras["category"]


def test_single_step_batch_matches_in_any_order_and_needs_every_call():
    from rewardprof.environments.acting import ToolCall

    a = {"type": "function_call", "name": "get", "arguments": '{"city": "Paris"}'}
    b = {"type": "function_call", "name": "get", "arguments": '{"city": "Oslo"}'}
    batch = {"type": "function_call_batch", "calls": [a, b]}
    both = [ToolCall("1", "get", b["arguments"]), ToolCall("2", "get", a["arguments"])]
    assert _single_step(batch, ChatReply(content=None, tool_calls=both)).reward == 1.0
    one = ChatReply(content=None, tool_calls=both[:1])
    verdict = _single_step(batch, one)
    assert (
        verdict.reward == 0.0 and "different than the expected value" in verdict.extras["category"]
    )


def test_a_rows_earlier_calls_become_chat_tool_calls_and_tool_messages():
    from rewardprof.environments.base import RowError, extract_messages

    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    items = [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "summary": []},
        call,
        {**call, "call_id": "c2"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
    ]
    messages = extract_messages({"responses_create_params": {"input": items}})
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["c1", "c2"]
    assert messages[3] == {"role": "tool", "tool_call_id": "c2", "content": "two"}
    with pytest.raises(RowError, match="a function_call item needs 'call_id'"):
        no_id = {k: v for k, v in call.items() if k != "call_id"}
        extract_messages({"responses_create_params": {"input": [no_id]}})

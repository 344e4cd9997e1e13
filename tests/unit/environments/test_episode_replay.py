"""NeMo Gym's recorded multi-turn rollouts replayed through rewardprof's agent loop (L0, in
process): a scripted engine serves each recorded model turn, rewardprof runs the tools itself,
and the tool outputs and the reward must equal the recorded ones."""

from __future__ import annotations

import asyncio
import json

import pytest

from rewardprof.environments import make_environment
from rewardprof.environments.base import VerifyContext
from rewardprof.environments.episode import ChatReply, run_episode
from tests.harness.episode_replay import derived_counter_rows, recorded_turns
from tests.harness.nemo_gym_rows import rows


def scripted(turns: list[ChatReply], seeds: list[int]):
    """A chat function serving `turns` in order (and noting the seed each turn was asked with)."""
    queue = list(turns)

    async def chat(messages, tools, seed):
        seeds.append(seed)
        return queue.pop(0)

    return chat


def _last_user(record: dict) -> str:
    return [m for m in record["responses_create_params"]["input"] if m["role"] == "user"][-1][
        "content"
    ]


def matched_cases(env: str) -> list[tuple[dict, dict]]:
    """Each recorded rollout with its task row, matched on the user's question (the recorded
    rows lack the expected answers)."""
    tasks = {_last_user(r): r for r in rows(env, "example.jsonl")}
    return [(tasks[_last_user(rec)], rec) for rec in rows(env, "example_rollouts.jsonl")]


def session_cases() -> list[tuple[dict, dict]]:
    records = rows("example_session_state_mgmt", "example_rollouts.jsonl")
    return list(zip(derived_counter_rows(records), records, strict=True))


def replay(env_name: str, task: dict, record: dict):
    env = make_environment(env_name)
    env.check_row(task)
    turns, outputs = recorded_turns(record["response"]["output"])
    seeds: list[int] = []
    episode = asyncio.run(
        run_episode(scripted(turns, seeds), env, task, env.prompt(task), 7, VerifyContext())
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

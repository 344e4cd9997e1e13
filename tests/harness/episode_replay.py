"""NeMo Gym's recorded multi-turn rollouts as a scripted engine: each recorded model turn
served in order, so rewardprof runs the tools itself and its outputs and rewards can be
compared with the recorded ones (in process: test_episode_replay.py; through the workflow:
test_episode_workflow.py)."""

from __future__ import annotations

import json
import re

from harness.nemo_gym_rows import rows
from rewardprof.environments.acting import ToolCall
from rewardprof.environments.base import extract_messages
from rewardprof.environments.episode import ChatReply


def recorded_turns(output: list[dict]) -> tuple[list[ChatReply], dict[str, str]]:
    """The model turns of a recorded Responses-API output, and each call's recorded output.

    A turn is the message and function_call items the model wrote before the next tool output;
    the agent appends the outputs of a turn's calls after them (reasoning items are skipped)."""
    turns: list[ChatReply] = []
    outputs: dict[str, str] = {}
    current: ChatReply | None = None
    for item in output:
        if item["type"] == "function_call_output":
            outputs[item["call_id"]] = item["output"]
            if current is not None:
                turns.append(current)
                current = None
            continue
        current = current or ChatReply(content=None, tool_calls=[])
        if item["type"] == "message":
            current.content = "".join(p.get("text", "") for p in item["content"])
        elif item["type"] == "function_call":
            current.tool_calls.append(ToolCall(item["call_id"], item["name"], item["arguments"]))
    if current is not None:
        turns.append(current)
    return turns, outputs


def last_user(messages: list[dict]) -> str:
    return [m for m in messages if m["role"] == "user"][-1]["content"]


def scripted(turns: list[ChatReply], seeds: list[int]):
    """A chat function serving `turns` in order (and noting the seed each turn was asked with)."""
    queue = list(turns)

    async def chat(messages, tools, seed):
        seeds.append(seed)
        return queue.pop(0)

    return chat


def matched_cases(env: str) -> list[tuple[dict, dict]]:
    """Each recorded rollout of `env` with its task row, matched on the user's question (the
    recorded rows lack the expected answers)."""
    tasks = {last_user(extract_messages(r)): r for r in rows(env, "example.jsonl")}
    return [
        (tasks[last_user(extract_messages(rec))], rec)
        for rec in rows(env, "example_rollouts.jsonl")
    ]


class ReplayEngine:
    """A FakeOpenAI tool policy replaying recordings keyed by the task's user message: turn k
    of a request (k = assistant messages past the prompt's own) is the recording's turn k."""

    def __init__(self, records: list[dict]):
        self.turns = {}
        for r in records:
            prompt = extract_messages(r)
            before = sum(1 for m in prompt if m["role"] == "assistant")
            self.turns[last_user(prompt)] = (recorded_turns(r["response"]["output"])[0], before)

    def __call__(self, body: dict) -> dict:
        turns, before = self.turns[last_user(body["messages"])]
        turn = turns[sum(1 for m in body["messages"] if m["role"] == "assistant") - before]
        calls = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in turn.tool_calls
        ]
        return {"content": turn.content, "tool_calls": calls}


def derived_counter_rows(records: list[dict]) -> list[dict]:
    """The counter's recordings as tasks: they carry neither `initial_count` nor
    `expected_count` (they ran other tasks than example.jsonl's), so both are read back from
    the recording: the start is the final read minus the increments, the expectation the
    final read (every recording scored 1)."""
    out = []
    for record in records:
        items = record["response"]["output"]
        calls = [i for i in items if i["type"] == "function_call"]
        added = sum(
            json.loads(c["arguments"])["count"] for c in calls if c["name"] != "get_counter_value"
        )
        reads = [json.loads(i["output"]) for i in items if i["type"] == "function_call_output"]
        final = [r["count"] for r in reads if "count" in r][-1]
        task = {k: v for k, v in record.items() if k != "response"}
        out.append({**task, "initial_count": final - added, "expected_count": final})
    return out


# math_with_code's recordings come from an older resource server than the 0.7.0 app.py that
# rewardprof follows (tests/functional/environments/test_math_with_code.py explains each pin):
# per recorded rollout, the indices of its calls whose output differs, and the 0.7.0 rewards
MATH_WITH_CODE_DIFFERS = {3: [5], 4: [3, 4, 5, 6, 9, 15, 16, 17]}
MATH_WITH_CODE_REWARDS = [1.0, 0.0, 0.0, 0.0, 1.0]
PYTHON_TOOL_FIELDS = ("stdout", "stderr", "result")


def differing_outputs(calls: list[tuple[str, str]], recorded: dict[str, str]) -> list[int]:
    """Indices of the (call id, output) pairs whose Python tool answer differs from the
    recorded one in stdout, stderr or result (the recording's answers have no other fields)."""
    return [
        i
        for i, (call_id, output) in enumerate(calls)
        if any(
            json.loads(output)[f] != json.loads(recorded[call_id])[f] for f in PYTHON_TOOL_FIELDS
        )
    ]


_ADD = re.compile(r"add (\d+)")


def counter_policy(body: dict) -> list[dict] | None:
    """The fake model of the counter task: first turn, one increment per "add N" (one too many
    when the episode's seed % 3 == 0); second turn, read the counter; then answer in text."""
    messages = body["messages"]
    turns = sum(1 for m in messages if m["role"] == "assistant")
    user = [m["content"] for m in messages if m["role"] == "user"][-1]
    if turns == 0:
        counts = [int(n) for n in _ADD.findall(user)]
        if body["seed"] % 3 == 0:
            counts[-1] += 1
        return [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "increment_counter", "arguments": json.dumps({"count": c})},
            }
            for i, c in enumerate(counts)
        ]
    if turns == 1:
        return [
            {
                "id": "call_get",
                "type": "function",
                "function": {"name": "get_counter_value", "arguments": "{}"},
            }
        ]
    return None

"""NeMo Gym's recorded multi-turn rollouts as a scripted engine: each recorded model turn
served in order, so rewardprof runs the tools itself and its outputs and rewards can be
compared with the recorded ones (in process: test_episode_replay.py; through the workflow:
test_episode_workflow.py)."""

from __future__ import annotations

import json

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

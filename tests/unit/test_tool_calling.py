"""Serve mode's tool calling (L0): the vLLM flags, the config rule for entries that act, and
the ChatML template a builtin model gets, rendered as vLLM renders it (jinja2)."""

from __future__ import annotations

import asyncio
import json

import jinja2
import pytest
from harness.nemo_gym_rows import DATA as NEMO_GYM

from rewardprof.core.config import ConfigError
from rewardprof.engine.client import ChatResult
from rewardprof.engine.reply import Choice
from rewardprof.engine.tool_calling import TOOLS_TEMPLATE, tool_args
from rewardprof.environments import make_environment
from rewardprof.manifest.load import validate_config
from rewardprof.stages.rollout.episodes import engine_chat

COUNTER = {"label": "c", "environment": "example_session_state_mgmt", "source": "c.jsonl"}
MATH = {"label": "m", "environment": "math", "source": "m.jsonl"}


def test_an_entry_that_acts_in_serve_mode_needs_a_tool_call_parser():
    with pytest.raises(ConfigError, match=r"entries\[1\] \(c\).*set engine.tool_call_parser"):
        validate_config({"entries": [MATH, COUNTER], "engine": {"mode": "serve"}})
    validate_config({"entries": [MATH, COUNTER]})  # a stage's file without the engine section
    validate_config({"entries": [MATH, COUNTER], "engine": {"tool_call_parser": "hermes"}})
    endpoint = {"mode": "endpoint", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
    validate_config({"entries": [COUNTER], "engine": endpoint})  # the endpoint's own business


def test_the_flags_and_the_builtin_models_template():
    plain = validate_config({"entries": [MATH]})
    assert tool_args(plain) == []
    builtin = validate_config({"entries": [COUNTER], "engine": {"tool_call_parser": "hermes"}})
    assert tool_args(builtin) == [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--chat-template",
        str(TOOLS_TEMPLATE),
    ]
    other = validate_config(
        {"entries": [COUNTER], "engine": {"model": "/m/qwen", "tool_call_parser": "hermes"}}
    )
    assert "--chat-template" not in tool_args(other)
    with pytest.raises(ConfigError, match="tool_call_parser"):
        validate_config({"entries": [MATH], "engine": {"tool_call_parser": "hermes --x"}})


def test_the_template_lists_the_tools_and_writes_calls_and_outputs_the_hermes_way():
    template = jinja2.Environment().from_string(TOOLS_TEMPLATE.read_text())
    tools = [{"type": "function", "function": {"name": "get_counter_value", "parameters": {}}}]
    messages = [
        {"role": "user", "content": "get the count"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_counter_value", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"count": 3}'},
    ]
    text = template.render(messages=messages, tools=tools, add_generation_prompt=True)
    listed = text[text.index("<tools>") : text.index("</tools>\n")]
    assert '"name": "get_counter_value"' in listed
    assert '<tool_call>{"name": "get_counter_value", "arguments": {}}</tool_call>' in text
    assert '<tool_response>{"count": 3}</tool_response>' in text
    assert text.endswith("<|im_start|>assistant\n")
    plain = template.render(messages=messages[:1], tools=None, add_generation_prompt=False)
    assert "<tools>" not in plain and "named SmolLM" in plain


def test_every_turn_sends_the_tool_choice_the_row_or_the_entry_asks_for():
    """The row's responses_create_params.tool_choice wins, then the entry's option, then auto;
    a Responses tool's `strict` reaches the engine (vLLM then holds arguments to the schema)."""
    row = json.loads((NEMO_GYM / "example_session_state_mgmt" / "example.jsonl").open().readline())
    env = make_environment("example_session_state_mgmt")
    assert env.tool_choice(row) == "auto"
    assert make_environment(env.name, {"tool_choice": "required"}).tool_choice(row) == "required"
    rcp = {**row["responses_create_params"], "tool_choice": "none"}
    assert env.tool_choice({**row, "responses_create_params": rcp}) == "none"
    assert all(t["function"]["strict"] is True for t in env.tools(row))

    sent = []

    class Client:  # what engine_chat asks of the shard's ChatClient
        async def complete(self, body, affinity=None):
            assert affinity is not None  # every turn carries its episode's affinity
            sent.append(body)
            return ChatResult([Choice(0, "", "tool_calls", 5, tool_calls=(("c0", "f", "{}"),))])

    chat = engine_chat(Client(), lambda m, n, seed: {"messages": m, "n": n, "seed": seed}, "none")
    reply = asyncio.run(chat([{"role": "user", "content": "hi"}], env.tools(row), 7))
    assert sent[0]["tool_choice"] == "none" and sent[0]["tools"] == env.tools(row)
    assert sent[0]["seed"] == 7 and reply.tool_calls[0].name == "f"

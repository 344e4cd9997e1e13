"""An assistant turn's tool calls, as an engine replies them, validated before any episode reads
them (L0)."""

from __future__ import annotations

import pytest

from rewardprof.engine.http_retry import AttemptError
from rewardprof.engine.reply import MAX_TOOL_CALLS, parse_choices


def reply(tool_calls) -> dict:
    message = {"role": "assistant", "content": None, "tool_calls": tool_calls}
    return {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}


def test_tool_calls_become_id_name_arguments_triples():
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    (choice,), _ = parse_choices(reply([call]), 1)
    assert choice.tool_calls == (("c1", "add", '{"a": 1}'),)
    assert choice.text == "" and choice.finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("calls", "says"),
    [
        ({"id": "c1"}, "not a list"),
        ([{"id": "c1", "function": "add"}], "function is missing"),
        ([{"id": 7, "function": {"name": "add", "arguments": "{}"}}], "id is int"),
        ([{"id": "c", "function": {"name": "add", "arguments": {"a": 1}}}], "arguments is dict"),
        (
            [{"id": "c", "function": {"name": "f", "arguments": "{}"}}] * (MAX_TOOL_CALLS + 1),
            "at most",
        ),
    ],
)
def test_a_malformed_tool_call_is_an_engine_error_naming_the_field(calls, says):
    with pytest.raises(AttemptError) as info:
        parse_choices(reply(calls), 1)
    assert says in str(info.value) and "tool_calls" in str(info.value)

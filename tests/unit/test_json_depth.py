"""Every JSON text rewardprof reads from outside (an engine's reply, a source row, a journal
line, an endpoint's model list) goes through `loads_bounded`: a text nested deeper than
MAX_JSON_DEPTH is refused before the parser recurses, so no RecursionError is ever raised or
caught (at the recursion limit the garbage collector's finalizers fail as well)."""

from __future__ import annotations

import json

import pytest

from rewardprof.core.limits import MAX_JSON_DEPTH, TooDeep, loads_bounded


@pytest.mark.parametrize("kind", [str, bytes])
def test_a_text_nested_past_the_limit_is_refused_before_it_is_parsed(kind, monkeypatch):
    parsed = []
    monkeypatch.setattr(json, "loads", lambda *a, **k: parsed.append(a))
    deep = "[" * 200_000 + "]" * 200_000
    with pytest.raises(TooDeep, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        loads_bounded(deep.encode() if kind is bytes else deep)
    one_more = "{" * MAX_JSON_DEPTH + "[1]" + "}" * MAX_JSON_DEPTH  # objects count as lists do
    with pytest.raises(TooDeep):
        loads_bounded(one_more.encode() if kind is bytes else one_more)
    assert parsed == []


def test_at_the_limit_it_parses_and_brackets_inside_strings_are_not_nesting():
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_bounded(at_limit) == json.loads(at_limit)
    # 10,000 brackets in a string (with escaped quotes and backslashes around them), a
    # non-ASCII character before them in UTF-8 bytes: one level of nesting
    text = json.dumps({"content": 'é \\" \\\\' + "[{" * 5_000 + '"', "n": [1, [2]]})
    assert loads_bounded(text) == json.loads(text)
    assert loads_bounded(text.encode()) == json.loads(text)


def test_a_malformed_text_is_still_the_parsers_error():
    with pytest.raises(json.JSONDecodeError):
        loads_bounded('{"a": [1, 2')
    with pytest.raises(json.JSONDecodeError):  # an unclosed string: its brackets count, few
        loads_bounded('["' + "[" * 10)

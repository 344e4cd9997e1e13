"""What a reply may hold (rewardprof.engine.reply): choices given once each, finish reasons
from a closed set, usage no larger than the request allows, text no longer than max_tokens
allows. Each violation is a typed engine_error naming it; the bounded read of the body itself
is tested against a real server in tests/faults/test_hostile_replies.py."""

from __future__ import annotations

import pytest

from rewardprof.core.kinds import FailureKind
from rewardprof.engine.http_retry import AttemptError
from rewardprof.engine.reply import MAX_COUNT, ReplyBounds, parse_choices


def _reply(*choices, usage=None) -> dict:
    payload = {
        "choices": [
            {"index": i, "message": {"content": text}, "finish_reason": reason}
            for i, text, reason in choices
        ]
    }
    if usage is not None:
        payload["usage"] = usage
    return payload


def _failure(payload, n, bounds: ReplyBounds | None = None) -> AttemptError:
    with pytest.raises(AttemptError) as info:
        parse_choices(payload, n, bounds or ReplyBounds())
    assert info.value.kind == FailureKind.ENGINE_ERROR and info.value.retry
    return info.value


def test_two_choices_with_one_index_are_refused():
    # the wrong answer second: which one is rollout 0 cannot be told, so neither is kept
    err = _failure(_reply((0, "\\boxed{5}", "stop"), (0, "\\boxed{6}", "stop")), 2)
    assert err.detail == "invalid reply: choices[1].index 0 repeats choices[0]"


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("stop", "stop"),
        ("LENGTH", "length"),
        ("length\0", "length"),
        (" Stop\n", "stop"),
        ("tool_calls", "tool_calls"),
        (None, None),
    ],
)
def test_finish_reason_is_normalized_into_the_closed_set(given, kept):
    choices, _ = parse_choices(_reply((0, "x", given)), 1)
    assert choices[0].finish_reason == kept


@pytest.mark.parametrize("given", ["stopped", "len gth", "length\0junk", "stop" * (16 << 10), ""])
def test_any_other_finish_reason_is_a_typed_failure(given):
    err = _failure(_reply((0, "x", given)), 1)
    assert err.detail.startswith("invalid reply: choices[0].finish_reason ")
    assert len(err.detail) < 200  # a 64 KiB reason is not copied into the record


def test_impossible_usage_counts_are_refused():
    bounds = ReplyBounds(max_tokens=100, max_chars=3200)
    ok = _reply((0, "x", "stop"), (1, "y", "stop"), usage={"completion_tokens": 200})
    assert len(parse_choices(ok, 2, bounds)[0]) == 2  # exactly max_tokens x n
    over = _reply((0, "x", "stop"), (1, "y", "stop"), usage={"completion_tokens": 201})
    assert "usage.completion_tokens is 201, outside [0, 200]" in _failure(over, 2, bounds).detail
    huge = _reply((0, "x", "stop"), usage={"completion_tokens": MAX_COUNT + 1})
    assert "outside [0, 1073741824]" in _failure(huge, 1).detail  # even with no max_tokens
    prompt = _reply((0, "x", "stop"), usage={"prompt_tokens": 2**30 + 1})
    assert "usage.prompt_tokens" in _failure(prompt, 1).detail
    ids = _reply((0, "x", "stop"))
    ids["choices"][0]["token_ids"] = list(range(101))
    assert "token_ids length is 101, outside [0, 100]" in _failure(ids, 1, bounds).detail


def test_a_completion_longer_than_max_tokens_allows_is_reply_too_large():
    bounds = ReplyBounds.of_request({"max_tokens": 4}, chars_per_token=8)
    assert bounds == ReplyBounds(4, 32)
    assert parse_choices(_reply((0, "a" * 32, "length")), 1, bounds)[0][0].text == "a" * 32
    err = _failure(_reply((0, "a" * 33, "length")), 1, bounds)
    assert err.detail == "reply_too_large: choices[0].message.content has 33 characters, over 32"


def test_the_body_bound_follows_the_request():
    bounds = ReplyBounds(max_tokens=64, max_chars=64 * 32)
    # every character as a 12-byte JSON escape, every token id, and 1 MiB for the rest
    assert bounds.body_bytes(2) == (1 << 20) + 2 * (64 * 32 * 12 + 64 * 12)
    assert bounds.body_bytes(2) < bounds.body_bytes(4)
    assert ReplyBounds().body_bytes(8) == 64 << 20  # no max_tokens: the default bound

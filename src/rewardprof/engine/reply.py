"""An engine's chat-completions reply, validated into the rollout record's types.

Every field that reaches a record is checked here, before anything is journaled: the body is
UTF-8 JSON of sane depth (`rewardprof.engine.http_retry.parse_json_body`), `content` is text
(or null), `finish_reason` text (or null), `usage` an object of non-negative int32 counts,
`token_ids` a list. A reply that does not validate is an
AttemptError of kind engine_error naming the field and what it was: the client retries it like
a 5xx, and once attempts run out the rollouts it was for are `engine_error` with that reason.
Nothing of an unvalidated reply ever reaches the journal (a list where the record has a string
would make its segment unwritable, and every later run of the shard would fail on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rewardprof.core.kinds import INT32_MAX, TokensSource
from rewardprof.engine.http_retry import invalid_reply as invalid


@dataclass
class Choice:
    index: int  # 0..n-1 within the original request
    text: str
    finish_reason: str | None
    completion_tokens: int | None
    tokens_source: str | None = None  # a TokensSource: how completion_tokens was counted


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _text(value: Any, where: str) -> str | None:
    """A string field of the record: text or null, encodable as UTF-8 (JSON's `\\ud800` decodes
    to a lone surrogate that no file can hold)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(f"{where} is {_kind(value)}, not a string")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise invalid(f"{where} is not valid Unicode (lone surrogate at {exc.start})") from None
    return value


def _count(value: Any, where: str) -> int | None:
    """A token count: null or an int in [0, 2^31) (bool is not a count)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{where} is {_kind(value)}, not an integer")
    if not 0 <= value <= INT32_MAX:
        raise invalid(f"{where} is {value}, outside [0, {INT32_MAX}]")
    return value


def _usage(payload: dict[str, Any]) -> tuple[int | None, int | None]:
    """(prompt_tokens, completion_tokens) of `usage`; it may be absent or null."""
    usage = payload.get("usage")
    if usage is None:
        return None, None
    if not isinstance(usage, dict):
        raise invalid(f"usage is {_kind(usage)}, not an object")
    return (
        _count(usage.get("prompt_tokens"), "usage.prompt_tokens"),
        _count(usage.get("completion_tokens"), "usage.completion_tokens"),
    )


def _choice(c: Any, pos: int, n: int) -> Choice:
    where = f"choices[{pos}]"
    if not isinstance(c, dict):
        raise invalid(f"{where} is {_kind(c)}, not an object")
    msg = c.get("message")
    if not isinstance(msg, dict):
        raise invalid(f"{where}.message is {_kind(msg)}, not an object")
    index = c.get("index", pos)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
        raise invalid(f"{where}.index {index!r} out of range")
    text = _text(msg.get("content"), f"{where}.message.content") or ""
    finish = _text(c.get("finish_reason"), f"{where}.finish_reason")
    ids = c.get("token_ids")
    if ids is not None and not isinstance(ids, list):
        raise invalid(f"{where}.token_ids is {_kind(ids)}, not a list")
    tokens = _count(len(ids), f"{where}.token_ids length") if ids is not None else None
    return Choice(index, text, finish, tokens, TokensSource.ENGINE if ids is not None else None)


def parse_choices(payload: Any, n: int) -> tuple[list[Choice], int | None]:
    """The choices of a reply to a request for `n` samples, and its prompt tokens."""
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
        raise invalid("no 'choices' list")
    prompt_tokens, total = _usage(payload)
    choices = [_choice(c, pos, n) for pos, c in enumerate(payload["choices"])]
    unknown = [c for c in choices if c.completion_tokens is None]
    if unknown and total is not None:
        _apportion(unknown, max(0, total - sum(c.completion_tokens or 0 for c in choices)))
    return choices, prompt_tokens


def _apportion(unknown: list[Choice], left: int) -> None:
    """Completion tokens of the samples without token ids, from what usage has left."""
    if len(unknown) == 1:  # the only sample without ids: exactly what usage has left
        unknown[0].completion_tokens = left
        unknown[0].tokens_source = TokensSource.USAGE
        return
    # The fallback when the server sent no token_ids (engine.return_token_ids): the API reports
    # one sum for n samples, split here by text length. An estimate that depends on how
    # rollouts were batched into requests; labeled as such.
    # Largest remainders: the shares add up to the request's total.
    chars = sum(len(c.text) for c in unknown) or len(unknown)
    exact = [left * (len(c.text) or chars / len(unknown)) / chars for c in unknown]
    counts = [int(x) for x in exact]
    by_rest = sorted(range(len(unknown)), key=lambda i: counts[i] - exact[i])
    for i in by_rest[: left - sum(counts)]:
        counts[i] += 1
    for c, count in zip(unknown, counts, strict=True):
        c.completion_tokens, c.tokens_source = count, TokensSource.APPORTIONED

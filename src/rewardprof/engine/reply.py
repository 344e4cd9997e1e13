"""An engine's chat-completions reply, validated into the rollout record's types.

Every field that reaches a record is checked here, before anything is journaled: the body is
UTF-8 JSON of sane depth (`rewardprof.engine.http_retry.parse_json_body`), `content` is text
(or null) of at most `max_chars` characters (else `reply_too_large`), `finish_reason` null or
one of FINISH_REASONS (case, blanks and NULs around it ignored: "LENGTH" is a truncation),
each choice index given once, `usage` an object of non-negative counts no larger than the
request allows (completion tokens at most max_tokens x n, any count at most 2^30), `token_ids`
a list no longer than max_tokens. A reply that does not validate is an
AttemptError of kind engine_error naming the field and what it was: the client retries it like
a 5xx, and once attempts run out the rollouts it was for are `engine_error` with that reason.
Nothing of an unvalidated reply ever reaches the journal (a list where the record has a string
would make its segment unwritable, and every later run of the shard would fail on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rewardprof.core.kinds import TokensSource
from rewardprof.engine.http_retry import DEFAULT_MAX_REPLY_BYTES, reply_too_large
from rewardprof.engine.http_retry import invalid_reply as invalid

MAX_COUNT = 1 << 30  # no real request or reply has this many tokens
MAX_TOOL_CALLS = 256  # calls in one assistant turn; more is not a reply to trust
# The finish reasons of the OpenAI API and vLLM; anything else is not a reply to trust.
FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})


@dataclass(frozen=True)
class ReplyBounds:
    """What a reply to one request can hold: `max_tokens` per choice (None: unbounded by the
    request), and `max_chars` of text per choice."""

    max_tokens: int | None = None
    max_chars: int | None = None

    @classmethod
    def of_request(cls, body: dict[str, Any], chars_per_token: int) -> ReplyBounds:
        max_tokens = body.get("max_tokens")
        if not isinstance(max_tokens, int) or max_tokens <= 0:
            return cls()
        return cls(max_tokens, max_tokens * chars_per_token)

    def body_bytes(self, n: int) -> int:
        """Most bytes a reply with `n` such choices can take: each character as JSON escapes
        it (at most 12 bytes, a surrogate pair), each token id, and 1 MiB for the rest."""
        if self.max_chars is None or self.max_tokens is None:
            return DEFAULT_MAX_REPLY_BYTES
        return (1 << 20) + n * (self.max_chars * 12 + self.max_tokens * 12)


@dataclass
class Choice:
    index: int  # 0..n-1 within the original request
    text: str
    finish_reason: str | None
    completion_tokens: int | None
    tokens_source: str | None = None  # a TokensSource: how completion_tokens was counted
    # the calls of an assistant turn that called tools: (id, name, arguments as JSON text)
    tool_calls: tuple[tuple[str, str, str], ...] = ()


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


def _count(value: Any, where: str, most: int = MAX_COUNT) -> int | None:
    """A token count: null or an int in [0, most] (bool is not a count)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{where} is {_kind(value)}, not an integer")
    if not 0 <= value <= most:
        raise invalid(f"{where} is {value}, outside [0, {most}]")
    return value


def _usage(payload: dict[str, Any], n: int, bounds: ReplyBounds) -> tuple[int | None, int | None]:
    """(prompt_tokens, completion_tokens) of `usage`; it may be absent or null."""
    usage = payload.get("usage")
    if usage is None:
        return None, None
    if not isinstance(usage, dict):
        raise invalid(f"usage is {_kind(usage)}, not an object")
    most = MAX_COUNT if bounds.max_tokens is None else min(MAX_COUNT, bounds.max_tokens * n)
    return (
        _count(usage.get("prompt_tokens"), "usage.prompt_tokens"),
        _count(usage.get("completion_tokens"), "usage.completion_tokens", most),
    )


def _finish_reason(value: Any, where: str) -> str | None:
    """`finish_reason` as one of FINISH_REASONS (or null)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise invalid(f"{where} is {_kind(value)}, not a string")
    reason = value[:64].strip(" \t\r\n\0").lower()
    if reason not in FINISH_REASONS or len(value) > 64:
        shown = value[:32].encode("ascii", "backslashreplace").decode()
        raise invalid(f"{where} {shown!r} is not one of {', '.join(sorted(FINISH_REASONS))}")
    return reason


def _choice(c: Any, pos: int, n: int, bounds: ReplyBounds) -> Choice:
    where = f"choices[{pos}]"
    if not isinstance(c, dict):
        raise invalid(f"{where} is {_kind(c)}, not an object")
    msg = c.get("message")
    if not isinstance(msg, dict):
        raise invalid(f"{where}.message is {_kind(msg)}, not an object")
    index = c.get("index", pos)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
        raise invalid(f"{where}.index {index!r} out of range")
    content = msg.get("content")
    if (
        bounds.max_chars is not None
        and isinstance(content, str)
        and len(content) > bounds.max_chars
    ):
        raise reply_too_large(
            f"{where}.message.content has {len(content)} characters, over {bounds.max_chars}"
        )
    text = _text(content, f"{where}.message.content") or ""
    finish = _finish_reason(c.get("finish_reason"), f"{where}.finish_reason")
    ids = c.get("token_ids")
    if ids is not None and not isinstance(ids, list):
        raise invalid(f"{where}.token_ids is {_kind(ids)}, not a list")
    most = MAX_COUNT if bounds.max_tokens is None else bounds.max_tokens
    tokens = _count(len(ids), f"{where}.token_ids length", most) if ids is not None else None
    source = TokensSource.ENGINE if ids is not None else None
    calls = _tool_calls(msg.get("tool_calls"), f"{where}.message.tool_calls")
    return Choice(index, text, finish, tokens, source, calls)


def _tool_calls(value: Any, where: str) -> tuple[tuple[str, str, str], ...]:
    """An assistant message's `tool_calls` as (id, name, arguments) triples (null: none)."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TOOL_CALLS:
        raise invalid(f"{where} is not a list of at most {MAX_TOOL_CALLS} calls")
    out = []
    for i, call in enumerate(value):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise invalid(f"{where}[{i}].function is missing")
        call_id = _text(call.get("id"), f"{where}[{i}].id") or f"call_{i}"
        name = _text(function.get("name"), f"{where}[{i}].function.name") or ""
        arguments = _text(function.get("arguments"), f"{where}[{i}].function.arguments") or ""
        out.append((call_id, name, arguments))
    return tuple(out)


def parse_choices(
    payload: Any, n: int, bounds: ReplyBounds = ReplyBounds()
) -> tuple[list[Choice], int | None]:
    """The choices of a reply to a request for `n` samples, and its prompt tokens."""
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
        raise invalid("no 'choices' list")
    prompt_tokens, total = _usage(payload, n, bounds)
    choices = [_choice(c, pos, n, bounds) for pos, c in enumerate(payload["choices"])]
    first_at: dict[int, int] = {}
    for pos, c in enumerate(choices):
        if c.index in first_at:
            raise invalid(f"choices[{pos}].index {c.index} repeats choices[{first_at[c.index]}]")
        first_at[c.index] = pos
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

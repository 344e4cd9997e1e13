"""Replies no client should trust: the fake server's faults that answer with a malformed reply.

Two kinds, both used as fault strings of `rewardprof.testing.fake_server.FakeOpenAI`:

- `MANGLE`: a well-formed completion with one field of the wrong type, e.g. `content_list`
  (content as a list of parts), `content_dict`, `finish_reason_int`, `usage_str` (usage as a
  string), `usage_tokens_str`, `token_ids_str`, `tokens_huge` (a count past int32),
  `surrogate` (content is the JSON escape of a lone surrogate). The completion is built as
  usual, then changed in place.
- `RAW`: a body that is not a valid reply at all, as (status, content type, bytes):
  `not_utf8` (a 200 whose body is not UTF-8), `not_utf8_500` (a proxy's Latin-1 error page),
  `deep_json` (arrays nested 100,000 deep), `huge_int` (an integer of 5,000 digits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _choices(key: str, value: Callable[[Any], Any]) -> Callable[[dict], None]:
    def mangle(payload: dict) -> None:
        for choice in payload["choices"]:
            target = choice["message"] if key == "content" else choice
            target[key] = value(target.get(key))

    return mangle


def _usage(value: Callable[[dict], Any]) -> Callable[[dict], None]:
    def mangle(payload: dict) -> None:
        payload["usage"] = value(payload["usage"])

    return mangle


MANGLE: dict[str, Callable[[dict], None]] = {
    "content_list": _choices("content", lambda text: [{"type": "text", "text": text}]),
    "content_dict": _choices("content", lambda text: {"text": text}),
    "content_number": _choices("content", lambda text: 42),
    "finish_reason_int": _choices("finish_reason", lambda reason: 7),
    "token_ids_str": _choices("token_ids", lambda ids: "1,2,3"),
    "surrogate": _choices("content", lambda text: text + "\ud800"),
    "usage_str": _usage(lambda usage: f"{usage['completion_tokens']} tokens"),
    "usage_tokens_str": _usage(lambda usage: dict(usage, completion_tokens="17")),
    "tokens_huge": _usage(lambda usage: dict(usage, prompt_tokens=2**40)),
}

RAW: dict[str, tuple[int, str, bytes]] = {
    "not_utf8": (
        200,
        "application/json",
        b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "\xff\xfe"}, '
        b'"finish_reason": "stop"}]}',
    ),
    "not_utf8_500": (
        500,
        "text/html",
        "<html><body>Erreur interne : le mandataire a échoué</body></html>".encode("latin-1"),
    ),
    "deep_json": (200, "application/json", b"[" * 100_000 + b"]" * 100_000),
    "huge_int": (
        200,
        "application/json",
        b'{"choices": [], "usage": {"prompt_tokens": 1' + b"0" * 5000 + b"}}",
    ),
}

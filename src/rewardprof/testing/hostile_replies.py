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
- `STREAMED`: a reply too large to hold, written as the client reads it: `gzip_bomb` (2 MB of
  `Content-Encoding: gzip` inflating to 2 GiB), `endless` (a chunked body that never ends),
  `huge_completion` (a well-formed reply whose content is 100 MB).
- More `MANGLE`: `duplicate_index` (a second choice with index 0, a wrong answer), finish
  reasons `finish_reason_upper` ("LENGTH"), `finish_reason_nul` ("length\\0"),
  `finish_reason_huge` (64 KiB), and `usage_huge` (completion_tokens 2^30).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import struct
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web


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
    "usage_huge": _usage(lambda usage: dict(usage, completion_tokens=2**30)),
    "finish_reason_upper": _choices("finish_reason", lambda reason: "LENGTH"),
    "finish_reason_nul": _choices("finish_reason", lambda reason: "length\0"),
    "finish_reason_huge": _choices("finish_reason", lambda reason: "stop" * (16 << 10)),
}


def _duplicate_index(payload: dict) -> None:
    """A second choice claiming index 0, with another answer: which one is rollout 0?"""
    first = payload["choices"][0]
    twin = dict(first, message=dict(first["message"], content="\\boxed{-1}"))
    payload["choices"].append(twin)


MANGLE["duplicate_index"] = _duplicate_index

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


_PREFIX = b'{"choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "'
_MiB = 1 << 20


@functools.cache
def _deflated_block() -> tuple[bytes, bytes]:
    """(the raw deflate of the JSON prefix, of 1 MiB of "a") each ended by a full flush: after
    one the compressor starts afresh, so the block repeated n times inflates to n MiB."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(_PREFIX) + c.flush(zlib.Z_FULL_FLUSH)
    return head, c.compress(b"a" * _MiB) + c.flush(zlib.Z_FULL_FLUSH)


async def _written(request: web.Request, resp: web.StreamResponse, parts) -> web.StreamResponse:
    """Write `parts` until done or the client hangs up (a bounded reader does, early)."""
    await resp.prepare(request)
    try:
        for part in parts:
            await resp.write(part)
            await asyncio.sleep(0)
        await resp.write_eof()
    except (ConnectionError, RuntimeError):  # the client went away: what a bound does
        pass
    return resp


async def gzip_bomb(request: web.Request) -> web.StreamResponse:
    """2 MB of gzip inflating to 2 GiB. Its trailer's CRC is not computed (no bounded reader
    gets there; an unbounded one has already lost)."""
    head, block = _deflated_block()
    resp = web.StreamResponse(
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"}
    )

    def parts():
        yield b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + head  # gzip header, deflate
        for _ in range(2048):
            yield block
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        yield c.compress(b'"}}]}') + c.flush() + struct.pack("<II", 0, (2048 * _MiB) & 0xFFFFFFFF)

    return await _written(request, resp, parts())


async def endless(request: web.Request) -> web.StreamResponse:
    """A chunked 200 that never ends: text inside a JSON string, 64 KiB at a time, until the
    client hangs up."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.enable_chunked_encoding()

    def parts():
        yield _PREFIX
        while True:
            yield b"a" * (64 << 10)

    return await _written(request, resp, parts())


async def huge_completion(request: web.Request) -> web.StreamResponse:
    """A well-formed reply (Content-Length given) whose one choice's content is 100 MB."""
    size = 100 * _MiB
    tail = b'"}}], "usage": {"prompt_tokens": 5, "completion_tokens": 5}}'
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    resp.content_length = len(_PREFIX) + size + len(tail)

    def parts():
        yield _PREFIX
        for _ in range(size // _MiB):
            yield b"a" * _MiB
        yield tail

    return await _written(request, resp, parts())


STREAMED: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "gzip_bomb": gzip_bomb,
    "endless": endless,
    "huge_completion": huge_completion,
}


def quoted_auth(request: web.Request) -> str:
    """The request's Authorization header as a careless server quotes it: as sent, and the
    credential decoded (Basic: user:password)."""
    got = request.headers.get("Authorization", "")
    scheme, _, value = got.partition(" ")
    decoded = value
    if scheme == "Basic":
        with contextlib.suppress(ValueError):
            decoded = base64.b64decode(value).decode("latin-1")
    return f"Authorization: {got}; decoded: {decoded}"

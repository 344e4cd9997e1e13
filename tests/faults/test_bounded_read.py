"""L1: `read_bounded` inflates gzip and deflate bodies itself, never past its bound. A healthy
compressed reply reads whole; a gzip bomb (2 MB inflating to 2 GiB) is cut at the bound with
the memory of the bound, not of the body, whatever aiohttp would have done; an encoding that
was not asked for, or a body that does not inflate, is a typed `invalid_reply`."""

from __future__ import annotations

import asyncio
import gzip
import tracemalloc
import zlib

import aiohttp
import pytest
from aiohttp import web

from rewardprof.core.kinds import FailureKind
from rewardprof.engine.http_retry import AttemptError, client_session, read_bounded
from rewardprof.testing.hostile_replies import gzip_bomb

BODY = b'{"choices": [{"index": 0, "message": {"content": "' + b"x" * 300_000 + b'"}}]}'


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


ENCODED = {
    "gzip": gzip.compress(BODY),
    "deflate": zlib.compress(BODY),  # with the zlib wrapper, as RFC 9110 says
    "raw-deflate": _raw_deflate(BODY),  # as some servers send "deflate"
}


async def _encoded(request: web.Request) -> web.Response:
    kind = request.match_info["kind"]
    encoding = {"raw-deflate": "deflate", "not-gzip": "gzip"}.get(kind, kind)
    body = {"not-gzip": b"plain text, not gzip", "br": b"\x1b\x00"}.get(kind) or ENCODED[kind]
    return web.Response(body=body, headers={"Content-Encoding": encoding})


async def _read(path: str, max_bytes: int) -> tuple[bytes, bool, int]:
    """(body, cut, peak bytes Python allocated while reading) for GET `path`."""
    app = web.Application()
    app.router.add_get("/bomb", gzip_bomb)
    app.router.add_get("/enc/{kind}", _encoded)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with (
            client_session(aiohttp.TCPConnector()) as session,
            session.get(f"http://127.0.0.1:{port}{path}") as resp,
        ):
            tracemalloc.start()
            try:
                body, cut = await read_bounded(resp, max_bytes)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    finally:
        await runner.cleanup()
    return body, cut, peak


@pytest.mark.parametrize("kind", sorted(ENCODED))
def test_a_compressed_reply_reads_whole(kind):
    body, cut, _ = asyncio.run(_read(f"/enc/{kind}", len(BODY)))
    assert body == BODY and not cut


def test_a_compressed_reply_one_byte_over_is_cut():
    body, cut, _ = asyncio.run(_read("/enc/gzip", len(BODY) - 1))
    assert cut and body == BODY[:-1]


def test_a_gzip_bomb_is_cut_at_the_bound_holding_only_the_bound():
    bound = 1 << 20
    body, cut, peak = asyncio.run(_read("/bomb", bound))
    assert cut and len(body) == bound
    # the bound, its joined copy and a chunk in flight; the bomb inflates to 2 GiB
    assert peak < 4 * bound, peak


@pytest.mark.parametrize(
    "kind,detail", [("br", "Content-Encoding 'br' not asked for"), ("not-gzip", "not valid gzip")]
)
def test_a_body_that_does_not_inflate_is_an_invalid_reply(kind, detail):
    with pytest.raises(AttemptError) as err:
        asyncio.run(_read(f"/enc/{kind}", 1 << 20))
    assert err.value.kind == FailureKind.ENGINE_ERROR and detail in str(err.value)

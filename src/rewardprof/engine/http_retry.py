"""The one retry core of rewardprof's OpenAI-compatible HTTP clients: the rollout client
(`rewardprof.engine.client`) and the judge (`rewardprof.environments.judge`).

What is transient: no response within the timeout, a connection error, HTTP 408, 429 and 5xx,
and a 200 whose body is not UTF-8 JSON or that a client finds invalid; any other status fails
at once (`status_error`). The wait before retrying after attempt n is
min(backoff_max_s, backoff_initial_s * 2^(n-1)) times a jitter in [0.5, 1.5), and never shorter
than the server's Retry-After (delta-seconds or an HTTP date), which is honoured up to
`retry_after_max_s`: `Retry-After: 999999999` is a wait of that long, not of 31 years. A request
gives up after `max_attempts`, or when the next wait would take it past `budget_s`
(`with_retries`): every wait is bounded, and so is the whole request.

A body is read in chunks and inflated here, never by aiohttp (`client_session` turns its
decompression off): each compressed chunk is inflated to at most what is left of `max_bytes`, so
past `max_bytes` of decompressed body the read stops and the attempt fails as `reply_too_large`
(`read_bounded`). A gzip bomb or a chunked body that never ends costs at most `max_bytes` of
memory, whatever the library version or how fast the server writes. An error page is read only
as far as its one-line detail needs.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import re
import time
import urllib.parse
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from rewardprof.core import redaction
from rewardprof.core.errors import RewardprofError
from rewardprof.core.kinds import FailureKind
from rewardprof.core.limits import TooDeep, loads_bounded

T = TypeVar("T")

DEFAULT_MAX_REPLY_BYTES = 64 << 20  # a reply's body when the caller names no bound
ERROR_BODY_BYTES = 64 << 10  # of a non-200 body: enough for its detail and its markers
REPLY_TOO_LARGE = "reply_too_large"  # the detail's first word when a reply is over its bound
_CHUNK = 64 << 10

_DELTA_SECONDS = re.compile(r"\s*\d+(\.\d+)?\s*")
# How OpenAI-compatible servers (vLLM, OpenAI, ...) word a prompt that does not fit the model.
_CONTEXT_MARKERS = (
    "context length",
    "context_length",
    "maximum context",
    "too long",
    "max_model_len",
    "maximum model length",
)


def retry_after_s(value: str | None) -> float | None:
    """A Retry-After header as seconds to wait: delta-seconds or an HTTP date (a past date is
    0); None when absent or unreadable."""
    if not value:
        return None
    if _DELTA_SECONDS.fullmatch(value):
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class AttemptError(RewardprofError):
    """One attempt failed. `kind` is a FailureKind, `detail` one line for the record; `retry`
    says whether another attempt may succeed, after at least `retry_after` seconds (what the
    server asked). `backoff=False` asks again at once: part of the answer came, the rest is
    asked for without waiting."""

    def __init__(
        self,
        kind: str,
        detail: str,
        retry: bool,
        retry_after: float | None = None,
        backoff: bool = True,
    ):
        super().__init__(detail)
        self.kind, self.detail, self.retry = kind, detail, retry
        self.retry_after, self.backoff = retry_after, backoff


def status_error(status: int, text: str, headers: Mapping[str, str]) -> AttemptError:
    """The failure of a non-200 answer: whether it is retried and its failure kind."""
    snippet = " ".join(text.split())[:200]
    detail = f"HTTP {status}: {snippet}"
    retry_after = retry_after_s(headers.get("Retry-After"))
    if status == 429:
        return AttemptError(FailureKind.RATE_LIMITED, detail, True, retry_after)
    if status >= 500 or status == 408:
        return AttemptError(FailureKind.ENGINE_ERROR, detail, True, retry_after)
    if status in (400, 413) and any(m in text.lower() for m in _CONTEXT_MARKERS):
        return AttemptError(FailureKind.CONTEXT_LENGTH, detail, False)
    return AttemptError(FailureKind.REQUEST_ERROR, detail, False)


def invalid_reply(what: str) -> AttemptError:
    """A 200 answer that does not validate: an engine_error, retried like a 5xx."""
    return AttemptError(FailureKind.ENGINE_ERROR, f"invalid reply: {what}", True)


def reply_too_large(what: str) -> AttemptError:
    """A reply over its bound: an engine_error, retried like any invalid reply (each attempt
    costs at most the bound)."""
    return AttemptError(FailureKind.ENGINE_ERROR, f"{REPLY_TOO_LARGE}: {what}", True)


# The encodings `read_bounded` inflates, and so the only ones `client_session` asks for.
ACCEPT_ENCODING = "gzip, deflate"


def client_session(
    connector: aiohttp.BaseConnector,
    headers: Mapping[str, str] | None = None,
    cookie_jar: aiohttp.abc.AbstractCookieJar | None = None,
) -> aiohttp.ClientSession:
    """A session whose bodies `read_bounded` inflates itself: aiohttp's own decompression
    is off, so no reply is ever inflated past the caller's bound."""
    return aiohttp.ClientSession(
        connector=connector,
        headers={"Accept-Encoding": ACCEPT_ENCODING, **(headers or {})},
        auto_decompress=False,
        cookie_jar=cookie_jar,
    )


class _Inflater:
    """Content-Encoding gzip or deflate, inflated a chunk at a time to at most a given size.
    A "deflate" body may come with the zlib wrapper (RFC 9110) or raw, as some servers send
    it; the first byte tells which."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._z = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding == "gzip" else None

    def inflate(self, chunk: bytes, max_out: int) -> bytes:
        """At most `max_out` bytes of what `chunk` (and what is left of earlier ones) inflates
        to; anything beyond stays compressed, in `zlib`'s unconsumed tail."""
        if self._z is None:  # deflate: wrapped when the first byte names method 8
            wbits = zlib.MAX_WBITS if chunk[:1] and chunk[0] & 0x0F == 8 else -zlib.MAX_WBITS
            self._z = zlib.decompressobj(wbits)
        try:
            return self._z.decompress(self._z.unconsumed_tail + chunk, max_out)
        except zlib.error as exc:
            raise invalid_reply(f"body is not valid {self.encoding} ({exc})") from None


def _inflater(resp: aiohttp.ClientResponse) -> _Inflater | None:
    encoding = resp.headers.get("Content-Encoding", "").strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return _Inflater("gzip")
    if encoding == "deflate":
        return _Inflater("deflate")
    raise invalid_reply(f"Content-Encoding {encoding[:40]!r} not asked for ({ACCEPT_ENCODING})")


async def read_bounded(resp: aiohttp.ClientResponse, max_bytes: int) -> tuple[bytes, bool]:
    """The decompressed body, read chunk by chunk and never more than `max_bytes` of it;
    (body, whether more was left unread). The response must come from a `client_session`
    (aiohttp's decompression off): the inflating happens here, bounded."""
    inflater = _inflater(resp)
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(_CHUNK):
        if inflater is not None:
            # one byte more than is left: getting it means the body is over its bound
            chunk = inflater.inflate(chunk, max_bytes - size + 1)
        size += len(chunk)
        if size > max_bytes:
            parts.append(chunk[: len(chunk) - (size - max_bytes)])
            return b"".join(parts), True
        parts.append(chunk)
    return b"".join(parts), False


def parse_json_body(raw: bytes) -> Any:
    """The JSON value of a 200 answer's body (RFC 8259: UTF-8). Not UTF-8, not JSON, or nested
    too deep (core/limits.py, loads_bounded): `invalid_reply`."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise invalid_reply(
            f"body is not UTF-8 (byte 0x{raw[exc.start]:02x} at {exc.start})"
        ) from None
    try:
        return loads_bounded(text)
    except TooDeep:
        raise invalid_reply("body JSON is nested too deep") from None
    except ValueError as exc:  # JSONDecodeError, and an integer of more than 4300 digits
        raise invalid_reply(f"malformed JSON in body ({str(exc).splitlines()[0][:80]})") from None


async def _error_text(resp: aiohttp.ClientResponse) -> str:
    """The start of an error page, as UTF-8 with bad bytes replaced; an undecodable one is ""
    (the status is what the attempt fails with)."""
    try:
        raw, _ = await read_bounded(resp, ERROR_BODY_BYTES)
    except AttemptError:
        return ""
    return raw.decode("utf-8", "replace")


async def post_json(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    timeout_s: float,
    headers: Mapping[str, str] | None = None,
    secret: str | None = None,
    max_bytes: int = DEFAULT_MAX_REPLY_BYTES,
) -> Any:
    """POST `body` as JSON; the JSON value of a 200 answer (`parse_json_body`) of at most
    `max_bytes` decompressed (else `reply_too_large`, found while reading). Anything else
    is an AttemptError: a status as `status_error` classifies it (its body's start read as
    UTF-8 with bad bytes replaced, as a proxy's error page may be anything; `secret` redacted
    from the text), no answer within `timeout_s` a timeout, a broken connection a
    connection_error."""
    try:
        async with session.post(
            url, json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            if resp.status != 200:
                text = await _error_text(resp)
                # redact before the detail is cut to length: no partial key survives
                raise status_error(resp.status, redact(text, secret), resp.headers)
            raw, cut = await read_bounded(resp, max_bytes)
            if cut:
                raise reply_too_large(f"body over {max_bytes} bytes (decompressed)")
    except TimeoutError:  # before OSError: a TimeoutError is an OSError too
        raise AttemptError(
            FailureKind.TIMEOUT, f"no response within {timeout_s:g}s", True
        ) from None
    except (aiohttp.ClientError, ConnectionError, OSError) as exc:
        raise AttemptError(
            FailureKind.CONNECTION_ERROR, f"{type(exc).__name__}: {exc}"[:200], True
        ) from None
    return parse_json_body(raw)


def bearer_url(url: str) -> str:
    """`url` without its user:password@, for requests that carry a bearer key: aiohttp refuses
    both at once (a ValueError on every request), and the key is what the server reads, as in
    the preflight check (rewardprof.engine.preflight)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


def redact(text: str, secret: str | None) -> str:
    """Text as recorded, through the one redaction path (rewardprof.core.redaction): `secret`
    (an API key: some providers quote the key they were sent in a 401 body), every secret the
    config names and any quoted Authorization value masked."""
    return redaction.redact(text, (secret,) if secret else None)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    backoff_initial_s: float
    backoff_max_s: float
    budget_s: float  # most time one request may spend, retries included
    retry_after_max_s: float  # longest Retry-After honoured

    @classmethod
    def of(cls, options: Any) -> RetryPolicy:
        """The policy of a config section with the retry keys (core.config_types.RetryOptions)."""
        return cls(
            options.max_attempts,
            options.backoff_initial_s,
            options.backoff_max_s,
            options.retry_budget_s,
            options.retry_after_max_s,
        )

    def retry_after(self, asked: float | None) -> float:
        """What is honoured of a server's Retry-After: at most retry_after_max_s."""
        return min(asked or 0.0, self.retry_after_max_s)

    def delay_s(self, attempt: int, retry_after: float | None, rng: random.Random) -> float:
        """The wait after failed attempt `attempt` (1-based)."""
        delay = min(self.backoff_max_s, self.backoff_initial_s * 2 ** (attempt - 1))
        delay *= rng.uniform(0.5, 1.5)  # jitter: clients that failed together spread out
        return max(delay, self.retry_after(retry_after))


async def with_retries(
    attempt: Callable[[int], Awaitable[T]],
    policy: RetryPolicy,
    rng: random.Random,
    on_retry: Callable[[AttemptError, float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> T:
    """`await attempt(n)` for n = 1, 2, ... until one returns. An AttemptError is retried while
    it is retryable and attempts and budget last (`on_retry(error, wait)` is told before each
    wait); otherwise it is raised, so the caller sees the last attempt's failure."""
    started = clock()
    n = 0
    while True:
        n += 1
        try:
            return await attempt(n)
        except AttemptError as exc:
            if not exc.retry:
                raise
            if not exc.backoff:
                if n >= policy.max_attempts:
                    raise
                continue
            wait = policy.delay_s(n, exc.retry_after, rng)
            if n >= policy.max_attempts or clock() - started + wait > policy.budget_s:
                raise
            if on_retry is not None:
                on_retry(exc, wait)
            await sleep(wait)

"""The OpenAI-compatible chat-completions client: retries, backoff, typed failures.

One `complete()` call asks for `n` samples with seed `s` (vLLM gives choice j the seed s + j, so
a rollout's text depends only on its own seed, whichever request it came from). Transient
errors (connection, timeout, 5xx, 429, malformed body) are retried with exponential backoff and
jitter, honouring Retry-After, within `max_attempts` and `retry_budget_s`; deterministic errors
(context length, other 4xx) fail at once. A server that returns fewer choices than asked is
asked again for the missing ones only.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from rewardprof.core.config import Rollout
from rewardprof.core.schemas import FailureKind, TokensSource

_CONTEXT_MARKERS = (
    "context length",
    "context_length",
    "maximum context",
    "too long",
    "max_model_len",
    "maximum model length",
)


@dataclass
class Choice:
    index: int  # 0..n-1 within the original request
    text: str
    finish_reason: str | None
    completion_tokens: int | None
    tokens_source: str | None = None  # a TokensSource: how completion_tokens was counted


@dataclass
class ChatResult:
    choices: list[Choice] = field(default_factory=list)
    prompt_tokens: int | None = None
    attempts: int = 0
    latency_s: float = 0.0
    failure: str | None = None  # a FailureKind when some choices are missing for good
    detail: str | None = None


class _Attempt(Exception):
    def __init__(self, kind: str, detail: str, retry: bool, retry_after: float | None = None):
        super().__init__(detail)
        self.kind, self.detail, self.retry, self.retry_after = kind, detail, retry, retry_after


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _classify_http(status: int, text: str, headers: Any) -> _Attempt:
    snippet = " ".join(text.split())[:200]
    if status == 429:
        return _Attempt(
            FailureKind.RATE_LIMITED,
            f"HTTP 429: {snippet}",
            True,
            _retry_after(headers.get("Retry-After")),
        )
    if status >= 500 or status == 408:
        return _Attempt(
            FailureKind.ENGINE_ERROR,
            f"HTTP {status}: {snippet}",
            True,
            _retry_after(headers.get("Retry-After")),
        )
    lowered = text.lower()
    if status in (400, 413) and any(m in lowered for m in _CONTEXT_MARKERS):
        return _Attempt(FailureKind.CONTEXT_LENGTH, f"HTTP {status}: {snippet}", False)
    return _Attempt(FailureKind.REQUEST_ERROR, f"HTTP {status}: {snippet}", False)


def _parse_choices(payload: Any, n: int) -> tuple[list[Choice], int | None]:
    if not isinstance(payload, dict) or not isinstance(payload.get("choices"), list):
        raise _Attempt(FailureKind.ENGINE_ERROR, "response has no 'choices' list", True)
    usage = payload.get("usage") or {}
    raw = payload["choices"]
    choices: list[Choice] = []
    for pos, c in enumerate(raw):
        msg = c.get("message") if isinstance(c, dict) else None
        if not isinstance(msg, dict):
            raise _Attempt(FailureKind.ENGINE_ERROR, "choice without a message", True)
        index = c.get("index", pos)
        if not isinstance(index, int) or not 0 <= index < n:
            raise _Attempt(FailureKind.ENGINE_ERROR, f"choice index {index!r} out of range", True)
        ids = c.get("token_ids")
        tokens, source = (len(ids), TokensSource.ENGINE) if isinstance(ids, list) else (None, None)
        choices.append(
            Choice(index, msg.get("content") or "", c.get("finish_reason"), tokens, source)
        )
    total = usage.get("completion_tokens")
    unknown = [c for c in choices if c.completion_tokens is None]
    if unknown and isinstance(total, int):
        known = sum(c.completion_tokens or 0 for c in choices)
        if len(unknown) == 1:  # the only sample without ids: exactly what usage has left
            unknown[0].completion_tokens = max(0, total - known)
            unknown[0].tokens_source = TokensSource.USAGE
        else:
            # The fallback when the server sent no token_ids (engine.return_token_ids): the
            # API reports one sum for n samples, split here by text length. An estimate that
            # depends on how rollouts were batched into requests; labeled as such.
            # Largest remainders: the shares add up to the request's total.
            chars = sum(len(c.text) for c in unknown) or len(unknown)
            exact = [
                max(0, total - known) * (len(c.text) or chars / len(unknown)) / chars
                for c in unknown
            ]
            counts = [int(x) for x in exact]
            by_rest = sorted(range(len(unknown)), key=lambda i: counts[i] - exact[i])
            for i in by_rest[: max(0, total - known) - sum(counts)]:
                counts[i] += 1
            for c, count in zip(unknown, counts, strict=True):
                c.completion_tokens, c.tokens_source = count, TokensSource.APPORTIONED
    return choices, usage.get("prompt_tokens")


class ChatClient:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        api_key: str | None,
        settings: Rollout,
        rng: random.Random | None = None,
    ):
        self.session = session
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._secret = api_key
        self.settings = settings
        self.rng = rng or random.Random()
        self.timeout = aiohttp.ClientTimeout(total=settings.request_timeout_s)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        s = self.settings
        delay = min(s.backoff_max_s, s.backoff_initial_s * 2 ** (attempt - 1))
        delay *= self.rng.uniform(0.5, 1.5)  # jitter: clients that failed together spread out
        return max(delay, retry_after or 0.0)

    async def _post(self, body: dict[str, Any]) -> Any:
        try:
            async with self.session.post(
                self.url, json=body, headers=self.headers, timeout=self.timeout
            ) as resp:
                text = await resp.text()
                if resp.status != 200:
                    # redact before the detail is cut to length: no partial key survives
                    raise _classify_http(resp.status, self.redact(text), resp.headers)
        except _Attempt:
            raise
        except TimeoutError:
            raise _Attempt(
                FailureKind.TIMEOUT,
                f"no response within {self.settings.request_timeout_s:g}s",
                True,
            ) from None
        except (aiohttp.ClientError, ConnectionError, OSError) as exc:
            raise _Attempt(
                FailureKind.CONNECTION_ERROR, f"{type(exc).__name__}: {exc}"[:200], True
            ) from None
        try:
            return json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise _Attempt(
                FailureKind.ENGINE_ERROR, "malformed JSON in response body", True
            ) from None

    async def complete(self, body: dict[str, Any]) -> ChatResult:
        """Ask for body['n'] samples; return every choice received, plus a failure if some
        never arrived. Choice indices refer to the original request (seed + index)."""
        n = int(body.get("n", 1))
        base_seed = body.get("seed")
        pending = list(range(n))  # original indices still missing
        result = ChatResult()
        started = time.monotonic()
        last: _Attempt | None = None
        while pending:
            if result.attempts >= self.settings.max_attempts:
                break
            result.attempts += 1
            # Missing choices are asked for again from the first missing index, so every
            # choice keeps the seed it would have had in the original request.
            first = pending[0]
            req = dict(body, n=n - first)
            if base_seed is not None:
                req["seed"] = base_seed + first
            t0 = time.monotonic()
            try:
                payload = await self._post(req)
                choices, prompt_tokens = _parse_choices(payload, n - first)
            except _Attempt as exc:
                last = exc
                if not exc.retry:
                    break
                delay = self._backoff(result.attempts, exc.retry_after)
                spent = time.monotonic() - started
                if (
                    result.attempts >= self.settings.max_attempts
                    or spent + delay > self.settings.retry_budget_s
                ):
                    break
                await asyncio.sleep(delay)
                continue
            result.latency_s += time.monotonic() - t0
            result.prompt_tokens = prompt_tokens
            got = {first + c.index: c for c in choices}
            for idx in list(pending):
                if idx in got:
                    c = got[idx]
                    result.choices.append(
                        Choice(idx, c.text, c.finish_reason, c.completion_tokens, c.tokens_source)
                    )
                    pending.remove(idx)
            if pending:
                last = _Attempt(
                    FailureKind.ENGINE_ERROR,
                    f"server returned {len(choices)} of {n - first} choices",
                    True,
                )
        if pending:
            assert last is not None
            result.failure, result.detail = last.kind, self.redact(last.detail)
        return result

    def redact(self, text: str) -> str:
        """Error text as recorded: some providers quote the API key they were sent in a 401
        body; the key never reaches a record, a log or an exception."""
        if self._secret and len(self._secret) >= 4:
            text = text.replace(self._secret, "[REDACTED]")
        return text

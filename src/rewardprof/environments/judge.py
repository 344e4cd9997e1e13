"""The judge client shared by llm_judge and math's judge fallback: an OpenAI-compatible chat
client with its own session, concurrency limit, retries (`rewardprof.engine.http_retry`) and cache.

A 429 (or another retryable status) with Retry-After pauses every request to the judge for that
long (at most `retry_after_max_s`), not only the refused one: no retry storm. Each judgement
retries within `max_attempts` and `retry_budget_s`, so no answer of the judge's makes a wait
without end. A judge that keeps failing, rejects the request
or replies with no parseable verdict raises JudgeError, which the environment records as a
`judge_error`, never as a wrong answer. Replies are cached on disk keyed by the request body
(model, messages, sampling), so a rerun does not pay for the same judgement twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import time
from pathlib import Path
from typing import Any

import aiohttp

from rewardprof.core.errors import RewardprofError
from rewardprof.core.kinds import FailureKind
from rewardprof.engine.http_retry import (
    AttemptError,
    RetryPolicy,
    bearer_url,
    client_session,
    post_json,
    with_retries,
)
from rewardprof.environments.options import JudgeOptions


class JudgeError(RewardprofError, RuntimeError):
    """The judge could not give a verdict (HTTP failure, retries exhausted, garbage reply)."""


class JudgeClient:
    """Options are validated when it is made; the HTTP session is made on first use."""

    def __init__(self, options: JudgeOptions):
        self.options = options
        self.url = options.base_url.rstrip("/") + "/chat/completions"
        self.model = options.model
        self.policy = RetryPolicy.of(options)
        self.sampling = {"temperature": options.temperature, "max_tokens": options.max_tokens}
        self.cache_dir = Path(options.cache_dir) if options.cache_dir else None
        self._rng = random.Random()
        self._api_key: str | None = None
        self._session: aiohttp.ClientSession | None = None
        self._sem: asyncio.Semaphore | None = None
        self._pause_until = 0.0  # set by a Retry-After: every request waits until then
        self.stats = {"requests": 0, "cache_hits": 0, "rate_limited": 0, "retries": 0}

    def _cache_path(self, body: dict[str, Any]) -> Path | None:
        if self.cache_dir is None:
            return None
        digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        return self.cache_dir / digest[:2] / f"{digest}.json"

    async def complete(self, messages: list[dict[str, Any]]) -> str:
        """The judge's reply text; JudgeError if it cannot be had."""
        body = {"model": self.model, "messages": messages, **self.sampling}
        path = self._cache_path(body)
        if path is not None and path.exists():
            self.stats["cache_hits"] += 1
            return json.loads(path.read_text())["content"]
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.options.concurrency)
        async with self._sem:
            content = await self._post_with_retries(body)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"request": body, "content": content}))
            os.replace(tmp, path)
        return content

    def _open_session(self) -> aiohttp.ClientSession:
        key_env = self.options.api_key_env
        self._api_key = os.environ.get(key_env) if key_env else None
        if key_env and not self._api_key:
            raise JudgeError(f"environment variable {key_env} (the judge's API key) is not set")
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        if self._api_key:
            self.url = bearer_url(self.url)
        return client_session(aiohttp.TCPConnector(limit=self.options.concurrency), headers)

    async def _post_with_retries(self, body: dict[str, Any]) -> str:
        if self._session is None:
            self._session = self._open_session()
        session = self._session
        made = 0

        async def attempt(n: int) -> str:
            nonlocal made
            made = n
            return await self._attempt(session, body)

        try:
            return await with_retries(attempt, self.policy, self._rng, self._on_retry)
        except AttemptError as exc:
            if not exc.retry:
                raise JudgeError(f"judge rejected the request: {exc.detail}") from None
            why = "" if made >= self.policy.max_attempts else " (retry_budget_s ran out)"
            raise JudgeError(f"judge failed after {made} attempts{why}: {exc.detail}") from None

    async def _attempt(self, session: aiohttp.ClientSession, body: dict[str, Any]) -> str:
        wait = self._pause_until - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self.stats["requests"] += 1
        try:
            payload = await post_json(
                session, self.url, body, self.options.request_timeout_s, secret=self._api_key
            )
        except AttemptError as exc:
            if exc.kind == FailureKind.RATE_LIMITED:
                self.stats["rate_limited"] += 1
            raise
        return self._content(payload)

    def _on_retry(self, error: AttemptError, wait: float) -> None:
        self.stats["retries"] += 1
        if error.retry_after is not None:  # the server asked everyone to wait (capped)
            pause = self.policy.retry_after(error.retry_after)
            self._pause_until = max(self._pause_until, time.monotonic() + pause)

    @staticmethod
    def _content(payload: Any) -> str:
        try:
            content = payload["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            # the reply is not quoted: it is the server's text, and may hold anything
            raise JudgeError("malformed judge response: no choices[0].message.content") from None
        if not isinstance(content, str):
            raise JudgeError("judge response has no text content")
        return content

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def parse_verdict(
    reply: str, pattern: re.Pattern[str], rewards: dict[str, float], score_max: float
) -> float:
    """The reward of the last match of `pattern` in the reply: a key of `rewards`, or a number
    divided by `score_max`; JudgeError when there is none or it falls outside [0, 1]."""
    matches = list(pattern.finditer(reply))
    if not matches:
        raise JudgeError(f"no verdict in judge reply: {reply[-200:]!r}")
    raw = (matches[-1].group(1) if pattern.groups else matches[-1].group(0)).strip()
    for key, value in rewards.items():
        if raw.lower() == key.lower():
            return float(value)
    try:
        score = float(raw) / score_max
    except ValueError:
        raise JudgeError(f"unknown verdict {raw!r}") from None
    if not 0.0 <= score <= 1.0:
        raise JudgeError(f"verdict {raw!r} outside [0, {score_max:g}]")
    return score

"""llm_judge: a judge model on its own OpenAI-compatible endpoint scores the completion.

Row format: the prompt (`responses_create_params.input`, `messages`, `prompt`) or `question`;
optionally a reference (`reference_answer` or `expected_answer`) and a `rubric`. The judge sees
`options.prompt_template` filled with {question}, {response}, {reference}, {rubric}; the last
match of `options.verdict_regex` in its reply is the verdict: a key of `options.verdict_rewards`
(default CORRECT -> 1, INCORRECT -> 0) or a number, divided by `options.score_max`.

Options: base_url and model (required), api_key_env, concurrency (requests in flight to the
judge, default 4), max_attempts, backoff_initial_s, backoff_max_s, request_timeout_s,
temperature, max_tokens, cache_dir. A 429 is retried after its `Retry-After` (and every other
request to the judge waits that long too: no retry storm); 5xx, timeouts and connection errors
back off exponentially. A judge that keeps failing, or a reply with no parseable verdict, is a
`judge_error` failure, never a wrong answer. Replies are cached on disk keyed by the request
body (model, messages, sampling), so a rerun does not pay for the same judgement twice.
"""

from __future__ import annotations

import asyncio
import email.utils
import hashlib
import json
import os
import random
import re
import string
import time
from pathlib import Path
from typing import Any

from rewardprof.core.config import ConfigError
from rewardprof.core.errors import RewardprofError
from rewardprof.core.schemas import FailureKind
from rewardprof.environments._options import check_options
from rewardprof.environments.base import (
    Environment,
    Verdict,
    VerifyContext,
    extract_messages,
    has_chat_prompt,
)

DEFAULT_TEMPLATE = """You are grading an answer to a question.

Question:
{question}

Reference answer (may be empty):
{reference}

Grading rubric (may be empty):
{rubric}

Answer to grade:
{response}

Decide whether the answer is correct. End your reply with exactly one line:
VERDICT: CORRECT or VERDICT: INCORRECT"""
DEFAULT_VERDICT_REGEX = r"VERDICT:\s*\**\s*(CORRECT|INCORRECT)"
_THINK = re.compile(r"<think>.*?</think>", re.S)
_FIELDS = {"question", "response", "reference", "rubric"}
ENV_OPTIONS = ("prompt_template", "verdict_regex", "verdict_rewards", "score_max")


class JudgeError(RewardprofError, RuntimeError):
    """The judge could not give a verdict (HTTP failure, retries exhausted, garbage reply)."""


def _retry_after_s(value: str | None) -> float | None:
    """Retry-After as seconds: either delta-seconds or an HTTP date."""
    if not value:
        return None
    if re.fullmatch(r"\s*\d+(\.\d+)?\s*", value):
        return float(value)
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, parsed.timestamp() - time.time())


CLIENT_OPTIONS = (
    "base_url",
    "model",
    "api_key_env",
    "concurrency",
    "max_attempts",
    "backoff_initial_s",
    "backoff_max_s",
    "request_timeout_s",
    "temperature",
    "max_tokens",
    "cache_dir",
)


class JudgeClient:
    """An OpenAI-compatible chat client for a judge: own session, concurrency, retries, cache.

    Options are checked when it is made (at materialize); the session is made on first use.
    """

    def __init__(self, options: dict[str, Any], extra_options: tuple[str, ...] = ()):
        check_options("llm judge", options, CLIENT_OPTIONS + extra_options)
        for key in ("base_url", "model"):
            if not options.get(key):
                raise ConfigError(f"llm judge: option {key!r} is required")
        if not str(options["base_url"]).startswith(("http://", "https://")):
            raise ConfigError("llm judge: base_url must start with http:// or https://")
        self.url = str(options["base_url"]).rstrip("/") + "/chat/completions"
        self.model = str(options["model"])
        self.api_key_env = options.get("api_key_env")
        self.concurrency = int(options.get("concurrency", 4))
        self.max_attempts = int(options.get("max_attempts", 5))
        self.backoff_initial_s = float(options.get("backoff_initial_s", 1.0))
        self.backoff_max_s = float(options.get("backoff_max_s", 60.0))
        self.request_timeout_s = float(options.get("request_timeout_s", 120.0))
        self.sampling = {
            "temperature": float(options.get("temperature", 0.0)),
            "max_tokens": int(options.get("max_tokens", 512)),
        }
        cache = options.get("cache_dir")
        self.cache_dir = Path(cache) if cache else None
        self._session: Any = None
        self._sem: asyncio.Semaphore | None = None
        self._pause_until = 0.0  # set by a 429: every request waits until then
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
            self._sem = asyncio.Semaphore(self.concurrency)
        async with self._sem:
            content = await self._post_with_retries(body)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps({"request": body, "content": content}))
            os.replace(tmp, path)
        return content

    async def _post_with_retries(self, body: dict[str, Any]) -> str:
        import aiohttp

        if self._session is None:
            api_key = os.environ.get(self.api_key_env) if self.api_key_env else None
            if self.api_key_env and not api_key:
                raise JudgeError(
                    f"environment variable {self.api_key_env} (the judge's API key) is not set"
                )
            headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
            self._session = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self.request_timeout_s),
                connector=aiohttp.TCPConnector(limit=self.concurrency),
            )
        last = "no attempt made"
        for attempt in range(1, self.max_attempts + 1):
            wait = self._pause_until - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self.stats["requests"] += 1
            retry_after = None
            try:
                async with self._session.post(self.url, json=body) as resp:
                    text = await resp.text()
                    if resp.status == 200:
                        return self._content(text)
                    last = f"HTTP {resp.status}: {text[:200]}"
                    if resp.status == 429:
                        self.stats["rate_limited"] += 1
                        retry_after = _retry_after_s(resp.headers.get("Retry-After"))
                    elif resp.status < 500:
                        raise JudgeError(f"judge rejected the request: {last}")
            except (TimeoutError, aiohttp.ClientError) as exc:
                last = f"{type(exc).__name__}: {exc}"
            if attempt == self.max_attempts:
                break
            self.stats["retries"] += 1
            backoff = min(self.backoff_max_s, self.backoff_initial_s * 2 ** (attempt - 1))
            backoff *= 0.5 + random.random() / 2
            delay = max(backoff, retry_after or 0.0)
            if retry_after is not None:  # the server asked everyone to wait
                self._pause_until = max(self._pause_until, time.monotonic() + retry_after)
            await asyncio.sleep(delay)
        raise JudgeError(f"judge failed after {self.max_attempts} attempts: {last}")

    @staticmethod
    def _content(text: str) -> str:
        try:
            content = json.loads(text)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise JudgeError(f"malformed judge response: {text[:200]}") from None
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


class LLMJudgeEnvironment(Environment):
    name = "llm_judge"
    failure_kinds = (FailureKind.JUDGE_ERROR,)

    def __init__(self, options: dict[str, Any] | None = None):
        super().__init__(options)
        self._judge = JudgeClient(self.options, ENV_OPTIONS)
        self.template = str(self.options.get("prompt_template", DEFAULT_TEMPLATE))
        used = {f for _, f, _, _ in string.Formatter().parse(self.template) if f}
        if used - _FIELDS:
            raise ConfigError(
                f"llm_judge prompt_template: unknown fields "
                f"{sorted(used - _FIELDS)}; available: {sorted(_FIELDS)}"
            )
        try:
            self.verdict_re = re.compile(self.options.get("verdict_regex", DEFAULT_VERDICT_REGEX))
        except re.error as exc:
            raise ConfigError(f"llm_judge verdict_regex: {exc}") from None
        self.rewards = dict(self.options.get("verdict_rewards", {"CORRECT": 1.0, "INCORRECT": 0.0}))
        self.score_max = float(self.options.get("score_max", 1.0))

    @property
    def judge(self) -> JudgeClient:
        return self._judge

    def check_row(self, row: dict[str, Any]) -> None:
        super().check_row(row)
        if "question" not in row:
            extract_messages(row)

    def judge_messages(self, row: dict[str, Any], completion: str) -> list[dict[str, str]]:
        question = row.get("question")
        if question is None:
            users = [m["content"] for m in extract_messages(row) if m["role"] == "user"]
            question = users[-1] if users else ""
        reference = row.get("reference_answer", row.get("expected_answer", ""))
        text = self.template.format(
            question=question,
            reference=reference or "",
            rubric=row.get("rubric") or "",
            response=_THINK.sub("", completion).strip(),
        )
        return [{"role": "user", "content": text}]

    def prompt(self, row: dict[str, Any]) -> list[dict[str, Any]]:
        if not has_chat_prompt(row):
            return [{"role": "user", "content": str(row["question"])}]
        return super().prompt(row)

    async def verify(self, row: dict[str, Any], completion: str, ctx: VerifyContext) -> Verdict:
        try:
            reply = await self.judge.complete(self.judge_messages(row, completion))
            reward = parse_verdict(reply, self.verdict_re, self.rewards, self.score_max)
        except JudgeError as exc:
            return Verdict.failure(FailureKind.JUDGE_ERROR, str(exc)[:300])
        return Verdict(reward, extras={"judge_reply_tail": reply[-300:]})

    async def aclose(self) -> None:
        await self._judge.aclose()

"""The one retry core of the rollout client and the judge (rewardprof.engine.http_retry):
Retry-After,
the backoff schedule, what is retryable, the attempt loop. Both clients are also tested against
servers: tests/faults/test_faults.py (the rollout client) and
tests/unit/environments/test_llm_judge.py (the judge)."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time

import pytest

from rewardprof.core.config import Rollout
from rewardprof.engine.http_retry import (
    AttemptError,
    RetryPolicy,
    retry_after_s,
    status_error,
    with_retries,
)
from rewardprof.environments.options import JudgeOptions


def test_retry_after_forms():
    assert retry_after_s("3") == 3.0 and retry_after_s(" 1.5 ") == 1.5
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after_s(future) <= 31
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert retry_after_s(past) == 0.0
    assert retry_after_s("soon") is None and retry_after_s(None) is None
    assert retry_after_s("") is None


@pytest.mark.parametrize(
    ("status", "body", "kind", "retry"),
    [
        (429, "slow down", "rate_limited", True),
        (500, "boom", "engine_error", True),
        (503, "busy", "engine_error", True),
        (408, "", "engine_error", True),
        (400, "This model's maximum context length is 2048 tokens", "context_length", False),
        (413, "prompt too long", "context_length", False),
        (400, "bad request", "request_error", False),
        (401, "bad key", "request_error", False),
    ],
)
def test_what_is_retryable(status, body, kind, retry):
    err = status_error(status, body, {})
    assert (err.kind, err.retry) == (kind, retry)
    assert err.detail.startswith(f"HTTP {status}: ")


def test_status_detail_is_one_short_line_and_carries_retry_after():
    err = status_error(503, "line one\n\n  line two " + "x" * 500, {"Retry-After": "7"})
    assert err.detail.startswith("HTTP 503: line one line two x") and len(err.detail) <= 210
    assert err.retry_after == 7.0
    assert status_error(400, "no", {"Retry-After": "7"}).retry_after is None


def test_backoff_doubles_with_jitter_up_to_the_cap_and_yields_to_retry_after():
    policy = _policy(max_attempts=10, backoff_initial_s=1.0, backoff_max_s=5.0)
    rng = random.Random(0)
    for attempt, nominal in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0), (8, 5.0)]:
        for _ in range(50):
            assert 0.5 * nominal <= policy.delay_s(attempt, None, rng) < 1.5 * nominal
    assert policy.delay_s(1, 30.0, rng) == 30.0  # a longer Retry-After wins over the backoff
    assert policy.delay_s(4, 0.0, rng) >= 2.5


class Script:
    """An attempt function that raises the scripted errors in turn, then returns "done"."""

    def __init__(self, *errors: AttemptError):
        self.errors = list(errors)
        self.calls: list[int] = []
        self.waits: list[float] = []

    async def __call__(self, n: int) -> str:
        self.calls.append(n)
        if self.errors:
            raise self.errors.pop(0)
        return "done"

    def on_retry(self, error: AttemptError, wait: float) -> None:
        self.waits.append(wait)


def _policy(**keys) -> RetryPolicy:
    return RetryPolicy.of(Rollout(**keys))


FAST = _policy(max_attempts=4, backoff_initial_s=0.001, backoff_max_s=0.002)


def _run(script: Script, policy: RetryPolicy = FAST) -> str:
    return asyncio.run(with_retries(script, policy, random.Random(0), script.on_retry))


def transient(retry_after: float | None = None, backoff: bool = True) -> AttemptError:
    return AttemptError("engine_error", "HTTP 503: busy", True, retry_after, backoff)


def test_transient_failures_are_retried_until_success():
    script = Script(transient(), transient())
    assert _run(script) == "done"
    assert script.calls == [1, 2, 3] and len(script.waits) == 2


def test_a_deterministic_failure_is_raised_at_once():
    script = Script(AttemptError("request_error", "HTTP 400: no", False))
    with pytest.raises(AttemptError, match="HTTP 400"):
        _run(script)
    assert script.calls == [1] and script.waits == []


def test_the_last_attempts_failure_is_raised_when_attempts_run_out():
    script = Script(*[transient()] * 3, AttemptError("timeout", "no response within 1s", True))
    with pytest.raises(AttemptError) as info:
        _run(script)
    assert info.value.kind == "timeout" and script.calls == [1, 2, 3, 4]
    assert len(script.waits) == 3  # no wait after the last attempt


def test_retry_after_is_waited_out():
    script = Script(transient(retry_after=0.3))
    started = time.monotonic()
    assert _run(script) == "done"
    assert script.waits == [0.3] and time.monotonic() - started >= 0.3


def test_the_budget_ends_retries_before_a_wait_would_pass_it():
    policy = _policy(max_attempts=100, backoff_initial_s=0.0, backoff_max_s=0.0, retry_budget_s=0.5)
    script = Script(transient(retry_after=0.2), transient(retry_after=0.2), transient(0.2))
    with pytest.raises(AttemptError):
        _run(script, policy)
    assert script.calls == [1, 2, 3] and script.waits == [0.2, 0.2]  # a third 0.2 s: past 0.5


def test_part_of_an_answer_is_asked_for_again_at_once():
    script = Script(transient(retry_after=60, backoff=False))
    assert _run(script) == "done"
    assert script.calls == [1, 2] and script.waits == []


class FakeClock:
    """Monotonic time that moves only when the retry loop sleeps: hours of waiting in no time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def _rate_limited(header: str) -> AttemptError:
    return status_error(429, "slow down", {"Retry-After": header})


def _run_on(clock: FakeClock, script: Script, policy: RetryPolicy) -> str:
    loop = with_retries(script, policy, random.Random(0), script.on_retry, clock, clock.sleep)
    return asyncio.run(loop)


@pytest.mark.parametrize("header", ["999999999", "9" * 400])  # 31 years; a float overflow (inf)
def test_a_retry_after_without_end_is_capped_and_spent_from_the_budget(header):
    # the defaults every client gets: Retry-After honoured up to 300 s, 1800 s per request
    policy = _policy(max_attempts=100)
    assert (policy.retry_after_max_s, policy.budget_s) == (300.0, 1800.0)
    clock = FakeClock()
    script = Script(*[_rate_limited(header)] * 100)
    with pytest.raises(AttemptError) as info:
        _run_on(clock, script, policy)
    assert info.value.kind == "rate_limited" and "HTTP 429" in info.value.detail
    assert script.waits == [300.0] * 6  # a seventh wait would pass the 1800 s budget
    assert clock.now == 1800.0 and len(script.calls) == 7


def test_a_retry_after_within_the_cap_is_honoured_exactly():
    clock = FakeClock()
    script = Script(_rate_limited("42"), _rate_limited("299.5"))
    assert _run_on(clock, script, _policy(backoff_initial_s=0.0)) == "done"
    assert script.waits == [42.0, 299.5] and clock.now == 341.5


def test_the_cap_and_budget_are_config_keys_of_the_rollout_client_and_the_judge():
    judge = JudgeOptions(base_url="http://127.0.0.1:9/v1", model="j", retry_after_max_s=5)
    assert RetryPolicy.of(judge).retry_after(1e9) == 5.0
    assert RetryPolicy.of(judge).budget_s == 1800.0
    rollout = RetryPolicy.of(Rollout(retry_after_max_s=0, retry_budget_s=60))
    assert (rollout.retry_after(30.0), rollout.budget_s) == (0.0, 60.0)
    clock = FakeClock()
    script = Script(*[_rate_limited("999999999")] * 100)
    with pytest.raises(AttemptError):
        _run_on(clock, script, _policy(retry_after_max_s=20, retry_budget_s=60))
    assert clock.now <= 60.0 and all(w <= 20.0 * 1.5 for w in script.waits)

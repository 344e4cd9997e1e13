"""llm_judge (and math's judge fallback) against a fake judge at the HTTP boundary."""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import time

import pytest
from harness.env_helpers import FakeJudge, load_cases, run
from pydantic import ValidationError

from rewardprof.core.config import ConfigError
from rewardprof.environments import make_environment
from rewardprof.environments.base import VerifyContext
from rewardprof.manifest.load import validate_config

ROW = load_cases("llm_judge")[0]["row"]
FAST = {"backoff_initial_s": 0.01, "backoff_max_s": 0.05}


async def judged(judge: FakeJudge, completions: list[str], ctx=None, **options):
    ctx = ctx or VerifyContext()  # the judge needs no pool; extraction runs off the loop
    async with judge.serving():
        env = make_environment(
            "llm_judge", {"base_url": judge.base_url, "model": "judge", **FAST, **options}
        )
        try:
            return await asyncio.gather(*(env.verify(ROW, c, ctx) for c in completions)), env
        finally:
            await env.aclose()


@pytest.mark.parametrize("form", ["seconds", "http_date"])
def test_429_retry_after_is_honoured(form):
    # the retry core shared with the rollout client (tests/faults: test_429_honours_retry_after)
    if form == "seconds":
        header, at_least = "1", 0.95
    else:  # 1 s resolution: a date 2 s ahead is 1-2 s away when the client reads it
        header, at_least = email.utils.formatdate(time.time() + 2, usegmt=True), 0.95
    judge = FakeJudge()
    judge.script.append((429, {"Retry-After": header}, "slow down"))
    (verdict,), env = run(judged(judge, ["Rayleigh scattering."]))
    assert (verdict.status, verdict.reward) == ("ok", 1.0)
    assert len(judge.requests) == 2
    assert judge.times[1] - judge.times[0] >= at_least, "retried before Retry-After elapsed"
    assert env.judge.stats["rate_limited"] == 1


def test_429_pauses_every_request_not_only_the_one_refused():
    judge = FakeJudge()
    judge.script.extend(
        [(429, {"Retry-After": "1"}, ""), {"reply": "VERDICT: CORRECT", "delay": 0.3}]
    )
    verdicts, _ = run(judged(judge, ["a", "b", "c"], concurrency=2))
    assert [v.reward for v in verdicts] == [1.0, 1.0, 1.0]
    assert len(judge.requests) == 4  # 3 verifications + 1 retry: no storm
    # The third verification got its slot while the pause was on: it waited too.
    assert min(judge.times[2:]) - judge.times[0] >= 0.95


def test_429_until_attempts_run_out_is_a_judge_error():
    judge = FakeJudge()
    judge.script.extend([(429, {"Retry-After": "0"}, "")] * 3)
    (verdict,), _ = run(judged(judge, ["x"], max_attempts=3))
    assert verdict.status == "judge_error" and verdict.reward is None
    assert "after 3 attempts" in verdict.detail and "429" in verdict.detail
    assert len(judge.requests) == 3


@pytest.mark.parametrize("status", [429, 503])
def test_a_retry_after_without_end_is_capped_and_the_judgement_a_judge_error(status):
    judge = FakeJudge()
    judge.script.extend([(status, {"Retry-After": "999999999"}, "come back in 31 years")] * 3)
    started = time.monotonic()
    (verdict,), env = run(judged(judge, ["x"], max_attempts=3, retry_after_max_s=0.2))
    assert verdict.status == "judge_error" and verdict.reward is None
    assert "after 3 attempts" in verdict.detail and f"HTTP {status}" in verdict.detail
    assert len(judge.requests) == 3
    gaps = [b - a for a, b in itertools.pairwise(judge.times)]
    assert all(gap >= 0.19 for gap in gaps)  # each retry waited the cap
    assert time.monotonic() - started < 30  # seconds, not years
    assert env.judge._pause_until - time.monotonic() < 0.2  # no request left paused for long


def test_the_retry_budget_ends_a_judgement_before_its_attempts_do():
    judge = FakeJudge()
    judge.script.extend([(429, {"Retry-After": "999999999"}, "")] * 10)
    options = {"max_attempts": 10, "retry_after_max_s": 0.2, "retry_budget_s": 0.5}
    (verdict,), _ = run(judged(judge, ["x"], **options))
    assert verdict.status == "judge_error"
    # waits of 0.2 s: a third would end past 0.5 s, so three attempts, then the budget says no
    assert "after 3 attempts (retry_budget_s ran out)" in verdict.detail
    assert len(judge.requests) == 3


def test_server_errors_are_retried_then_recovered():
    judge = FakeJudge()
    judge.script.extend([(500, {}, "boom"), (503, {}, "busy")])
    (verdict,), _ = run(judged(judge, ["x"]))
    assert (verdict.status, verdict.reward) == ("ok", 1.0)
    assert len(judge.requests) == 3


@pytest.mark.parametrize(
    ("item", "detail"),
    [
        ((400, {}, "bad request"), "rejected"),
        # a body that is not JSON is retried like a 5xx; when it stays so: a judge_error
        ((200, {"Content-Type": "application/json"}, "{not json"), "invalid reply: malformed"),
        ((200, {}, '{"choices": []}'), "malformed judge response"),
        ("The answer looks fine to me.", "no verdict"),
        ("VERDICT: MAYBE", "no verdict"),
    ],
)
def test_judge_garbage_is_a_judge_error_not_a_wrong_answer(item, detail):
    judge = FakeJudge()
    judge.script.extend([item] * 2)
    (verdict,), _ = run(judged(judge, ["x"], max_attempts=2))
    assert verdict.status == "judge_error" and verdict.reward is None
    assert detail in verdict.detail


def test_unreachable_judge_is_a_judge_error():
    env = make_environment(
        "llm_judge", {"base_url": "http://127.0.0.1:9/v1", "model": "j", "max_attempts": 2, **FAST}
    )

    async def go():
        try:
            return await env.verify(ROW, "x", VerifyContext())
        finally:
            await env.aclose()

    verdict = run(go())
    assert verdict.status == "judge_error" and "after 2 attempts" in verdict.detail


def test_cache_is_keyed_by_the_request(tmp_path):
    judge = FakeJudge()
    judge.script.extend(["VERDICT: INCORRECT", "VERDICT: CORRECT"])
    first, _ = run(judged(judge, ["answer one"], cache_dir=str(tmp_path)))
    again, _ = run(judged(judge, ["answer one"], cache_dir=str(tmp_path)))  # new env, same cache
    other, _ = run(judged(judge, ["answer two"], cache_dir=str(tmp_path)))
    assert [first[0].reward, again[0].reward, other[0].reward] == [0.0, 0.0, 1.0]
    assert len(judge.requests) == 2  # the repeated request was served from disk
    assert len(list(tmp_path.rglob("*.json"))) == 2


def test_own_concurrency_limit():
    judge = FakeJudge()
    judge.script.extend([{"reply": "VERDICT: CORRECT", "delay": 0.1}] * 6)
    verdicts, _ = run(judged(judge, [f"c{i}" for i in range(6)], concurrency=2))
    assert all(v.reward == 1.0 for v in verdicts)
    assert judge.max_in_flight == 2


def test_numeric_verdicts_with_a_custom_parser():
    options = {
        "verdict_regex": r"SCORE:\s*(\d+(?:\.\d+)?)",
        "score_max": 10,
        "prompt_template": "Rate 0-10.\n{question}\n{response}\nEnd with SCORE: n",
    }
    judge = FakeJudge()
    judge.script.extend(["SCORE: 7", "SCORE: 11"])
    verdicts, _ = run(judged(judge, ["a", "b"], concurrency=1, **options))
    assert verdicts[0].reward == pytest.approx(0.7)
    assert verdicts[1].status == "judge_error" and "outside" in verdicts[1].detail
    assert judge.requests[0]["messages"][0]["content"].startswith("Rate 0-10.")


def test_template_with_unknown_field_is_rejected():
    with pytest.raises(ValueError, match="unknown fields"):
        make_environment(
            "llm_judge",
            {"base_url": "http://x/v1", "model": "j", "prompt_template": "{question} {answer_key}"},
        )


# --- math's optional judge fallback -------------------------------------------------------

MATH_ROW = load_cases("math")[0]["row"]  # expected 3/4


async def math_judged(judge: FakeJudge, completion: str, ctx, judge_on: bool = True):
    async with judge.serving():
        options = {"judge": {"base_url": judge.base_url, "model": "j", **FAST}} if judge_on else {}
        env = make_environment("math", options)
        try:
            return await env.verify(MATH_ROW, completion, ctx)
        finally:
            await env.aclose()


def test_math_judge_fallback_is_off_by_default(ctx):
    judge = FakeJudge(default="VERDICT: EQUIVALENT")
    v = run(math_judged(judge, "\\boxed{three quarters}", ctx, judge_on=False))
    assert (v.status, v.reward) == ("ok", 0.0)
    assert judge.requests == []


def test_math_judge_fallback_rescues_what_math_verify_rejects(ctx):
    judge = FakeJudge(default="VERDICT: EQUIVALENT")
    v = run(math_judged(judge, "\\boxed{three quarters}", ctx))
    assert (v.status, v.reward, v.extras.get("judged")) == ("ok", 1.0, True)
    assert "three quarters" in judge.requests[0]["messages"][0]["content"]
    judge = FakeJudge(default="VERDICT: NOT_EQUIVALENT")
    v = run(math_judged(judge, "\\boxed{one half}", ctx))
    assert (v.status, v.reward) == ("ok", 0.0)
    judge = FakeJudge()  # math-verify accepts: the judge is not asked
    v = run(math_judged(judge, "\\boxed{0.75}", ctx))
    assert v.reward == 1.0 and judge.requests == []


def test_math_judge_garbage_is_a_judge_error(ctx):
    judge = FakeJudge(default="Hmm, hard to say.")
    v = run(math_judged(judge, "\\boxed{three quarters}", ctx))
    assert v.status == "judge_error" and v.reward is None


@pytest.mark.parametrize(
    ("env", "options", "message"),
    [
        ("llm_judge", {"model": "j"}, "options.base_url: required key is missing"),
        (
            "llm_judge",
            {"base_url": "127.0.0.1:8000", "model": "j"},
            "options.base_url: must start with http",
        ),
        (
            "llm_judge",
            {"base_url": "http://x/v1", "model": "j", "concurency": 2},
            "options.concurency: unknown key; did you mean concurrency?",
        ),
        (
            "llm_judge",
            {"base_url": "http://x/v1", "model": "j", "verdict_regex": "("},
            "options.verdict_regex: not a valid regex",
        ),
        (
            "math",
            {"judge": {"base_url": "http://x/v1"}},
            "options.judge.model: required key is missing",
        ),
        ("math", {"timeout": 3}, "options.timeout: unknown key; did you mean timeout_s?"),
        ("code", {"memory": 64}, "options.memory: unknown key; did you mean memory_mb?"),
        ("mcq", {"anything": 1}, "options.anything: unknown key"),
    ],
)
def test_bad_options_fail_with_the_config_and_when_the_environment_is_made(env, options, message):
    entry = {"label": "e", "environment": env, "source": "x.jsonl", "options": options}
    with pytest.raises(ConfigError) as info:
        validate_config({"entries": [entry]})
    assert f"entries[0].{message}" in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValidationError):
        make_environment(env, options)


def test_missing_api_key_is_a_judge_error(monkeypatch):
    monkeypatch.delenv("REWARDPROF_TEST_JUDGE_KEY", raising=False)
    judge = FakeJudge()
    (verdict,), _ = run(judged(judge, ["x"], api_key_env="REWARDPROF_TEST_JUDGE_KEY"))
    assert verdict.status == "judge_error" and "REWARDPROF_TEST_JUDGE_KEY" in verdict.detail
    assert judge.requests == []
    monkeypatch.setenv("REWARDPROF_TEST_JUDGE_KEY", "sk-test")
    (verdict,), _ = run(judged(judge, ["x"], api_key_env="REWARDPROF_TEST_JUDGE_KEY"))
    assert verdict.reward == 1.0

"""instruction_following scores one text the same way every time.

IFEval's english_lowercase / english_capital / response_language call langdetect, which samples
n-grams at random: unseeded, 'hello, world' passed english_lowercase in ~90 of 100 calls. These
tests score it 100 times through the verifier path a rollout job uses (a pebble process pool) and
expect one value; 100 draws at a 10% flip rate all agree with probability ~3e-5.
"""

from __future__ import annotations

import asyncio
import multiprocessing

import pebble
import pytest

from rewardprof.environments import VerifyContext, make_environment
from rewardprof.stages.rollout.verifying import make_pool

ROWS = {
    "english_lowercase": (
        {
            "prompt": "Greet the world in lowercase.",
            "instruction_id_list": ["change_case:english_lowercase"],
        },
        "hello, world",
    ),
    "english_capital": (
        {
            "prompt": "Greet the world in capitals.",
            "instruction_id_list": ["change_case:english_capital"],
        },
        "HAVE A NICE DAY",
    ),
    "response_language": (
        {
            "prompt": "Answer in English.",
            "instruction_id_list": ["language:response_language"],
            "kwargs": [{"language": "en"}],
        },
        "hello, world",
    ),
}


async def _score_many(ctx: VerifyContext, row: dict, text: str, times: int) -> list:
    env = make_environment("instruction_following")
    verdicts = await asyncio.gather(*(env.verify(row, text, ctx) for _ in range(times)))
    assert all(v.status == "ok" for v in verdicts), {v.detail for v in verdicts}
    return [v.reward for v in verdicts]


@pytest.mark.parametrize("check", sorted(ROWS))
def test_langdetect_checks_are_deterministic_in_the_rollout_pool(check):
    """The rollout job's own pool (verifying.make_pool: forked workers)."""
    row, text = ROWS[check]
    pool = make_pool(2)
    try:
        rewards = asyncio.run(_score_many(VerifyContext(pool=pool, timeout_s=60), row, text, 100))
    finally:
        pool.stop()
        pool.join(timeout=10)
    assert len(set(rewards)) == 1, f"{check}: {sorted(rewards).count(1.0)} of 100 passed"


def test_langdetect_is_seeded_in_spawned_workers_too():
    """A spawned worker inherits nothing from the parent: the environment seeds it itself."""
    row, text = ROWS["english_lowercase"]
    with pebble.ProcessPool(max_workers=2, context=multiprocessing.get_context("spawn")) as pool:
        rewards = asyncio.run(_score_many(VerifyContext(pool=pool, timeout_s=120), row, text, 100))
        pool.stop()
    assert len(set(rewards)) == 1, f"{rewards.count(1.0)} of 100 passed"
    # and the verdict is the one the parent process (inline, no pool) gives
    inline = asyncio.run(_score_many(VerifyContext(), row, text, 5))
    assert set(inline) == set(rewards)


def test_first_use_from_many_threads_at_once(monkeypatch):
    """Library use without a pool runs checks in threads: the first detect() calls race
    langdetect's lazy profile load (a racing call saw a partial profile set and flipped)."""
    from langdetect import DetectorFactory, detector_factory

    from rewardprof.environments.instruction_following import checks as instruction_checks

    # a process that has not scored anything yet
    monkeypatch.setattr(detector_factory, "_factory", None)
    monkeypatch.setattr(DetectorFactory, "seed", None)
    instruction_checks._load_registries.cache_clear()
    row, text = ROWS["english_lowercase"]
    rewards = asyncio.run(_score_many(VerifyContext(), row, text, 100))
    assert len(set(rewards)) == 1, f"{rewards.count(1.0)} of 100 passed"

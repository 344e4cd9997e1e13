"""Fixtures for the environment (verifier) tests: a real process pool and a context."""

from __future__ import annotations

import pebble
import pytest

from rewardprof.environments import VerifyContext, make_environment


@pytest.fixture(scope="session")
def pool():
    # Import the verifier libraries once, before the workers fork, so that each worker does not
    # pay for them again (reasoning-gym ~3 s, if-verifiable ~3 s, math-verify ~1 s of CPU).
    for name in ("math", "reasoning_gym", "instruction_following"):
        make_environment(name).warm()
    with pebble.ProcessPool(max_workers=2) as p:
        yield p
        p.stop()


@pytest.fixture
def ctx(pool):
    return VerifyContext(pool=pool, timeout_s=20)

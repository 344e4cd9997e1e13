"""Fixtures for the environment (verifier) tests: a real process pool and a context."""

from __future__ import annotations

import pebble
import pytest

from rewardprof.environments import VerifyContext


@pytest.fixture(scope="session")
def pool():
    with pebble.ProcessPool(max_workers=2) as p:
        yield p
        p.stop()


@pytest.fixture
def ctx(pool):
    return VerifyContext(pool=pool, timeout_s=20)

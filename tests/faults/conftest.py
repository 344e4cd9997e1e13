"""Fault and kill tests run the rollout stage in process or in forked children: warm the math
verifier once here so every verification worker forked later starts with SymPy loaded."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _warm_math_verify():
    from rewardprof.environments.math import math_equal

    assert math_equal("2", "2", 5)

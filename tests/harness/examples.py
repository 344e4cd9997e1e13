"""The hypothesis settings of the property tests: the same examples on every run (derandomized,
so CI is reproducible), no per-example deadline (a loaded machine is not a failure)."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def derandomized(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )

"""Every statistic against values computed by hand (the arithmetic is in the comments)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rewardprof.decisions.statistics.per_task import (
    beta_interval,
    grpo_signal,
    grpo_signal_array,
    grpo_signal_from_counts,
    interval_arrays,
    pass_at_k,
    pass_at_k_array,
    wilson_interval,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (4, 1, 1, 0.25),  # pass@1 = c/n
        (4, 1, 2, 0.5),  # 1 - C(3,2)/C(4,2) = 1 - 3/6
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (8, 2, 3, 1 - 20 / 56),  # 1 - C(6,3)/C(8,3)
        (8, 0, 3, 0.0),  # c = 0: never
        (8, 8, 3, 1.0),  # c = n: always
        (8, 6, 3, 1.0),  # n - c < k: every k-subset holds a pass
        (10, 1, 10, 1.0),  # k = n with one pass
        (16, 4, 4, 1 - 495 / 1820),  # 1 - C(12,4)/C(16,4)
    ],
)
def test_pass_at_k(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_undefined_when_fewer_samples_than_k():
    assert pass_at_k(2, 1, 3) is None
    assert pass_at_k(0, 0, 1) is None


def test_pass_at_k_array_matches_scalar_and_marks_undefined_nan():
    n = np.array([4, 5, 8, 8, 1, 0])
    c = np.array([1, 2, 0, 8, 1, 0])
    out = pass_at_k_array(n, c, 2)
    assert out[:4] == pytest.approx([0.5, 0.7, 0.0, 1.0])
    assert math.isnan(out[4]) and math.isnan(out[5])


Z = 1.959963984540054  # the 97.5% normal quantile


def test_wilson_bounds_by_hand():
    # c = 0, n = 10: center = half = (z^2/20) / (1 + z^2/10)
    hi = (Z * Z / 20) / (1 + Z * Z / 10)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 2 * hi))
    # c = 5, n = 10: center 0.5, half = z * sqrt(0.025 + z^2/400) / (1 + z^2/10)
    half = Z * math.sqrt(0.025 + Z * Z / 400) / (1 + Z * Z / 10)
    lo, hi = wilson_interval(5, 10)
    assert (lo, hi) == pytest.approx((0.5 - half, 0.5 + half))
    assert (round(lo, 4), round(hi, 4)) == (0.2366, 0.7634)
    assert wilson_interval(3, 0) is None


def test_wilson_narrower_at_lower_level():
    lo90, hi90 = wilson_interval(3, 8, 0.90)
    lo99, hi99 = wilson_interval(3, 8, 0.99)
    assert lo99 < lo90 < 3 / 8 < hi90 < hi99


def test_clopper_pearson_bounds_by_hand():
    # c = 0: upper solves (1-p)^n = 0.025 -> 1 - 0.025^(1/n); c = n: lower = 0.025^(1/n)
    assert beta_interval(0, 10) == pytest.approx((0.0, 1 - 0.025**0.1), abs=1e-9)
    assert beta_interval(10, 10) == pytest.approx((0.025**0.1, 1.0), abs=1e-9)
    # c = 1, n = 1: lower = 0.025, upper = 1
    assert beta_interval(1, 1) == pytest.approx((0.025, 1.0), abs=1e-9)
    # c = 5, n = 10: the textbook exact interval (0.1871, 0.8129), symmetric about 0.5
    lo, hi = beta_interval(5, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.1871, 0.8129)
    assert lo + hi == pytest.approx(1.0, abs=1e-9)
    assert beta_interval(0, 0) is None


def test_interval_arrays_match_scalars():
    c = np.array([0, 5, 10, 3, 0])
    n = np.array([10, 10, 10, 8, 0])
    for method, scalar in (("wilson", wilson_interval), ("beta", beta_interval)):
        lo, hi = interval_arrays(c, n, 0.95, method)
        for i in range(4):
            assert (lo[i], hi[i]) == pytest.approx(scalar(int(c[i]), int(n[i])), abs=1e-9)
        assert math.isnan(lo[4]) and math.isnan(hi[4])
    with pytest.raises(ValueError):
        interval_arrays(c, n, 0.95, "bogus")


def test_grpo_signal_binary():
    assert grpo_signal(0.0, 8) == 0.0
    assert grpo_signal(1.0, 8) == 0.0
    assert grpo_signal(0.5, 8) == pytest.approx(1 - 2 / 256)  # 1 - 0.5^8 - 0.5^8
    assert grpo_signal(0.5, 2) == pytest.approx(0.5)
    assert grpo_signal(0.25, 2) == pytest.approx(1 - 1 / 16 - 9 / 16)
    assert grpo_signal(None, 8) is None
    out = grpo_signal_array([0.0, 0.5, 1.0, np.nan], 8)
    assert out[:3] == pytest.approx([0.0, 1 - 2 / 256, 0.0]) and math.isnan(out[3])


def test_grpo_signal_from_reward_counts():
    # two values, two each: same as binary p = 0.5
    assert grpo_signal_from_counts([2, 2], 8) == pytest.approx(1 - 2 / 256)
    # three reward values with shares 1/4, 1/4, 1/2 and G = 2: 1 - (1/16 + 1/16 + 1/4)
    assert grpo_signal_from_counts([1, 1, 2], 2) == pytest.approx(0.625)
    assert grpo_signal_from_counts([4], 8) == 0.0  # one value: no variance ever
    assert grpo_signal_from_counts([], 8) is None

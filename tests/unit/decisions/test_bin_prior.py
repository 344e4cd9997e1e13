"""The histogram prior that widens the profile's credible intervals (decisions/priors/bins.py)."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from rewardprof.decisions.priors.bins import (
    COVERAGE_MIN_TASKS,
    bin_interval,
    binomial_upper_tail,
    fit_bins,
    widened,
)
from rewardprof.decisions.priors.posterior import fit_prior, posterior_columns
from rewardprof.decisions.statistics.betafn import betainc


def _expected_label(shape: list[float], n: int, tasks: int) -> np.ndarray:
    """Passes per task of a label whose counts are exactly their expected frequencies."""
    out = []
    for c in range(n + 1):
        prob = np.mean([comb(n, c) * p**c * (1 - p) ** (n - c) for p in shape])
        out += [c] * round(prob * tasks)
    return np.array(out)


@pytest.mark.parametrize(("n", "c"), [(4, 0), (4, 1), (4, 4), (16, 7)])
def test_the_binomial_tail_is_the_regularized_incomplete_beta(n, c):
    xs = [0.0, 0.01, 0.3, 0.5, 0.97, 1.0]
    expected = [betainc(c + 1, n - c + 1, x) if 0 < x < 1 else float(x >= 1) for x in xs]
    assert binomial_upper_tail(n, c, xs) == pytest.approx(expected, abs=1e-10)


def test_intervals_follow_the_data_not_the_grid():
    # every task at 5/10: the posterior sits around 1/2 with a density, not on one grid point
    weights = fit_bins(np.full(400, 10), np.full(400, 5))
    lo, hi = bin_interval(weights, 10, 5, 0.95)
    assert lo < 0.5 < hi and hi - lo < 0.5
    # an all-fail task keeps p = 0 in its interval (the point mass)
    weights = fit_bins(np.full(400, 4), np.r_[np.zeros(300), np.full(100, 2)])
    assert bin_interval(weights, 4, 0, 0.95)[0] == 0.0


def test_an_off_family_label_gets_intervals_that_hold_both_clusters():
    """p in {0, 0.03, 0.6}: a 1/4 task is about as likely at 0.03 as at 0.6. The family's
    interval (point masses + one Beta) leaves 0.03 out; the widened one holds both."""
    c = _expected_label([0.0, 0.03, 0.6], 4, 3000)
    n = np.full(len(c), 4)
    cols = posterior_columns(fit_prior(n, c), n, c, level=0.95, group_size=8, min_signal=0.1)
    lo, hi, flag = widened(n, c, cols["post_ci_low"], cols["post_ci_high"], 0.95)
    one = np.flatnonzero(c == 1)[0]
    assert cols["post_ci_low"][one] > 0.03  # the family alone misses the hard cluster
    assert lo[one] <= 0.03 and hi[one] >= 0.6
    # never narrower than the family's
    assert (lo <= cols["post_ci_low"]).all() and (hi >= cols["post_ci_high"]).all()
    assert flag == "widened"
    # below the measured minimum the label is flagged
    assert widened(n[:100], c[:100], lo[:100], hi[:100], 0.95)[2] == "may_undercover"
    assert COVERAGE_MIN_TASKS == 300

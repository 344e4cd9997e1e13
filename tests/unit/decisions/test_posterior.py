"""The posterior module against hand values, Monte Carlo and calibration (seeded: no luck)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rewardprof.decisions.priors.posterior import (
    JEFFREYS,
    MixturePrior,
    fit_prior,
    posterior,
    posterior_columns,
    prior_as_posterior,
    signal_root,
)
from rewardprof.decisions.statistics.betafn import betainc, betaln
from rewardprof.decisions.statistics.solvers import nelder_mead

PRIOR = MixturePrior(w0=0.3, w1=0.1, a=2.0, b=3.0)


def _draw_p(prior: MixturePrior, rng: np.random.Generator, size: int) -> np.ndarray:
    return prior_as_posterior(prior).sample(rng, size)


@pytest.mark.parametrize(
    ("a", "b", "x", "expected"),
    [
        (1.0, 1.0, 0.3, 0.3),  # uniform: I_x = x
        (3.0, 1.0, 0.5, 0.125),  # I_x(a, 1) = x^a
        (1.0, 4.0, 0.2, 1 - 0.8**4),  # I_x(1, b) = 1 - (1-x)^b
        (2.0, 3.0, 0.4, 0.5248),  # sum_{j>=2} C(4,j) 0.4^j 0.6^(4-j)
        (0.5, 0.5, 0.5, 0.5),  # symmetric
        (0.5, 0.5, 0.25, 1 / 3),  # arcsine law: (2/pi) asin(sqrt(x))
    ],
)
def test_betainc_by_hand(a, b, x, expected):
    assert betainc(a, b, x) == pytest.approx(expected, abs=1e-12)


def test_betainc_symmetry_and_betaln():
    for a, b, x in [(0.3, 7.0, 0.1), (12.5, 3.5, 0.9), (40.0, 41.0, 0.5)]:
        assert betainc(a, b, x) + betainc(b, a, 1 - x) == pytest.approx(1.0, abs=1e-12)
    assert betaln(2.0, 3.0) == pytest.approx(math.log(1 / 12))


def test_nelder_mead_finds_a_quadratic_minimum():
    x = nelder_mead(lambda v: (v[0] - 1.5) ** 2 + 3 * (v[1] + 2) ** 2, [0.0, 0.0])
    assert x == pytest.approx([1.5, -2.0], abs=1e-4)


def test_posterior_by_hand():
    # one pass in two: the point masses are ruled out; Beta(2 + 1, 3 + 1)
    post = posterior(PRIOR, 2, 1)
    assert (post.pi0, post.pi1, post.pib) == (0.0, 0.0, 1.0)
    assert post.mean() == pytest.approx(3 / 7)
    # no pass in two: pi0 : pib = 0.3 : 0.6 * B(2, 5) / B(2, 3) = 0.3 : 0.6 * (1/30) / (1/12)
    post = posterior(PRIOR, 2, 0)
    assert post.pi0 == pytest.approx(0.3 / (0.3 + 0.24))
    assert post.interval(0.95)[0] == 0.0  # the point mass at 0 is inside the interval


def test_fit_prior_recovers_the_mixture():
    rng = np.random.default_rng(1)
    p = _draw_p(PRIOR, rng, 20_000)
    n = rng.integers(4, 17, size=p.size)
    fitted = fit_prior(n, rng.binomial(n, p))
    assert fitted.w0 == pytest.approx(0.3, abs=0.02)
    assert fitted.w1 == pytest.approx(0.1, abs=0.02)
    assert fitted.a / (fitted.a + fitted.b) == pytest.approx(0.4, abs=0.03)
    assert fitted.tasks == 20_000
    assert fit_prior([0, 0], [0, 0]) == JEFFREYS  # nothing scored: Jeffreys


@pytest.mark.parametrize("level", [0.8, 0.95])
@pytest.mark.parametrize("fitted", [False, True])
def test_credible_intervals_cover_p_drawn_from_the_prior(level, fitted):
    rng = np.random.default_rng(7)
    p = _draw_p(PRIOR, rng, 20_000)
    n = np.full(p.size, 8)
    c = rng.binomial(n, p)
    prior = fit_prior(n, c) if fitted else PRIOR
    cols = posterior_columns(prior, n, c, level=level, group_size=8, min_signal=0.1)
    covered = (cols["post_ci_low"] <= p) & (p <= cols["post_ci_high"])
    assert covered.mean() >= level - 0.02


def test_expected_signal_and_probability_match_monte_carlo():
    rng = np.random.default_rng(3)
    g, s = 8, 0.5
    for n, c in [(4, 0), (4, 1), (2, 2), (8, 3), (1, 0)]:
        post = posterior(PRIOR, n, c)
        p = post.sample(rng, 400_000)
        signal = 1 - p**g - (1 - p) ** g
        se = signal.std() / math.sqrt(p.size)
        assert post.expected_signal(g) == pytest.approx(signal.mean(), abs=5 * se + 1e-9)
        assert post.prob_signal_at_least(g, s) == pytest.approx((signal >= s).mean(), abs=0.004)
        assert post.mean() == pytest.approx(p.mean(), abs=0.003)
        m = 6
        x = rng.binomial(m, p)
        assert post.predictive(m) == pytest.approx(
            np.bincount(x, minlength=m + 1) / p.size, abs=0.004
        )


def test_signal_root_and_edges():
    p = signal_root(8, 0.5)
    assert 1 - p**8 - (1 - p) ** 8 == pytest.approx(0.5)
    assert signal_root(8, 0.999) is None  # above the maximum 1 - 2^-7
    post = prior_as_posterior(PRIOR)
    assert post.prob_signal_at_least(8, 0.0) == 1.0
    assert post.prob_signal_at_least(8, 0.999) == 0.0


def test_posterior_signal_is_unbiased_where_the_plug_in_is_biased_low():
    # tasks with p = 0.1 among tasks from a known prior; n = 4 rollouts, G = 8: the true signal
    # is 1 - 0.1^8 - 0.9^8 = 0.57; the plug-in averages far lower. Averaged over tasks drawn from
    # the prior, the posterior expectation equals the mean true signal (the tower rule).
    rng = np.random.default_rng(11)
    p = _draw_p(PRIOR, rng, 50_000)
    n = np.full(p.size, 4)
    c = rng.binomial(n, p)
    cols = posterior_columns(PRIOR, n, c, level=0.95, group_size=8, min_signal=0.1)
    truth = 1 - p**8 - (1 - p) ** 8
    plug_in = 1 - (c / n) ** 8 - (1 - c / n) ** 8
    assert cols["post_signal"].mean() == pytest.approx(truth.mean(), abs=0.01)
    assert plug_in.mean() < truth.mean() - 0.1

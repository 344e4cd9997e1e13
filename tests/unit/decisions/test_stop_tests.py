"""Adaptive stopping tests against brute force over every remaining outcome."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from rewardprof.core.config import Export
from rewardprof.decisions.planning.stop_tests import (
    bayes_stop,
    exact_stop,
    flip_probability,
    keep_at,
)
from rewardprof.decisions.priors.posterior import MixturePrior, posterior

PRIOR = MixturePrior(w0=0.5, w1=0.2, a=1.0, b=1.0)
RULES = {
    "default": Export(),
    "band": Export(min_pass_rate=0.25, max_pass_rate=0.75),
    "signal": Export(min_grpo_signal=0.9, drop_all_pass=False),
}


def test_one_pass_and_one_fail_settle_keep_under_the_default_rules():
    stop, keep = exact_stop(Export(), [2, 2, 2, 16, 16], [1, 0, 2, 0, 3], 16, 8)
    assert stop.tolist() == [True, False, False, True, True]
    assert keep[[0, 4]].all() and not keep[3]


@pytest.mark.parametrize("rules", list(RULES))
def test_exact_stops_only_when_every_outcome_gives_the_same_decision(rules):
    ex, k = RULES[rules], 6
    for n in range(0, k + 1):
        for c in range(0, n + 1):
            stop, keep = exact_stop(ex, [n], [c], k, 8)
            finals = {
                bool(keep_at(ex, k, [c + sum(rest)], 8)[0])
                for rest in itertools.product((0, 1), repeat=k - n)
            }
            assert bool(stop[0]) == (len(finals) == 1), (n, c, finals)
            if stop[0]:
                assert finals == {bool(keep[0])}


def test_flip_probability_matches_simulation():
    rng = np.random.default_rng(5)
    ex, k = Export(), 16
    for n, c in [(4, 0), (4, 4), (6, 0), (3, 1)]:
        p_flip, keep = flip_probability(ex, PRIOR, n, c, k, 8)
        # draw p from the task's posterior, then the remaining rollouts
        post = posterior(PRIOR, n, c)
        p = post.sample(rng, 200_000)
        finals = c + rng.binomial(k - n, p)
        keeps = keep_at(ex, k, finals, 8)
        assert p_flip == pytest.approx(np.mean(keeps != keep), abs=0.004)


def test_bayes_stopped_tasks_disagree_with_fixed_k_at_most_delta():
    # tasks drawn from the prior the test uses: among tasks bayes stops after 8 rollouts, the
    # share whose fixed-K decision differs is at most delta (each one's P(flip) < delta)
    rng = np.random.default_rng(9)
    ex, k, delta, size = Export(), 16, 0.05, 40_000
    u = rng.random(size)
    p = np.where(u < 0.5, 0.0, np.where(u < 0.7, 1.0, rng.random(size)))
    paths = rng.random((size, k)) < p[:, None]
    c8 = paths[:, :8].sum(axis=1)
    stop, keep, p_flip = bayes_stop(ex, PRIOR, np.full(size, 8), c8, k, 8, delta)
    fixed = keep_at(ex, k, paths.sum(axis=1), 8)
    assert stop.mean() > 0.5  # the all-fail and all-pass starts mostly stop
    assert (p_flip[stop] < delta).all()
    assert np.mean(keep[stop] != fixed[stop]) <= delta
    # and the posterior's flip probability is calibrated: expected vs observed flips
    assert np.mean(keep[stop] != fixed[stop]) == pytest.approx(p_flip[stop].mean(), abs=0.005)

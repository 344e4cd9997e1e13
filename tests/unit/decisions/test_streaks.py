"""The streak test of bayes' first round (decisions/planning/streaks.py): a label whose tasks'
rollouts come in streaks gets the exact test, one whose rollouts are independent keeps the
prior's."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from rewardprof.core.config import Export
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records, plan
from rewardprof.decisions.planning.streaks import STREAK_ALPHA, round_ends, streak_tests, upper_tail
from rewardprof.decisions.priors.label import fit_label_priors

K = 16
BAYES = AdaptiveSettings("bayes", first=2, round_size=2, delta=0.02, group_size=8, bayes_from=4)


def test_the_binomial_tail_is_exact():
    assert upper_tail(0, 7) == 1.0
    assert upper_tail(7, 7) == 2.0**-7
    assert upper_tail(4, 7) == 0.5  # symmetric at the middle of an odd count
    assert math.isclose(upper_tail(3, 5), 16 / 32)
    assert upper_tail(0, 0) == 1.0  # no split task: nothing to say


def _rows(patterns: list[str]):
    """One task per pattern of '0'/'1' (rollouts 0..n-1), label "a"."""
    task, idx, passed = [], [], []
    for t, pat in enumerate(patterns):
        for r, ch in enumerate(pat):
            task.append(t)
            idx.append(r)
            passed.append(ch == "1")
    return np.full(len(task), "a", dtype=object), task, idx, passed


def test_round_ends_follow_exacts_rounds():
    assert round_ends(2, 2, 4) == [2, 4]
    assert round_ends(2, 2, 3) == [2, 3]  # a last round of one rollout: no pair to test
    assert round_ends(1, 1, 4) == [1, 2, 3, 4]


def test_only_tasks_whose_last_round_is_split_after_an_agreeing_prefix_count():
    patterns = ["0001"] * 9 + ["0010"] * 3  # 9 repeat the prefix first, 3 the other way
    patterns += ["0000", "1111", "01", "0101", "001"]  # not split, settled, mixed, no round end
    test = streak_tests(*_rows(patterns), ends=[2, 4])["a"]
    assert (test.split, test.near) == (12, 9)
    assert test.p_value == upper_tail(9, 12)
    # a task with a missing rollout (failed) says nothing
    label, task, idx, passed = _rows(["0001"])
    assert streak_tests(label[1:], task[1:], idx[1:], passed[1:], [2, 4])["a"].split == 0


def test_a_split_round_that_always_repeats_the_prefix_first_is_streaky():
    assert streak_tests(*_rows(["0001", "1110"] * 5), ends=[2, 4])["a"].streaky  # 2^-10
    assert not streak_tests(*_rows(["0001", "0010"] * 20), ends=[2, 4])["a"].streaky
    assert not streak_tests(*_rows(["0001"] * 40), ends=[1, 2, 3, 4])["a"].split  # no pairs


def _markov(rng, p, rho):
    x = np.zeros((len(p), K))
    x[:, 0] = rng.random(len(p)) < p
    for t in range(1, K):
        up = np.where(x[:, t - 1] == 1, p + rho * (1 - p), p * (1 - rho))
        x[:, t] = rng.random(len(p)) < up
    return x


def _run(rewards):
    """exact's first round, the priors as the prior job fits them (streak test included), the
    rounds: (agreement with fixed K, the label's test)."""
    tasks = len(rewards)
    k, labels = np.full(tasks, K), np.full(tasks, "a", dtype=object)
    pos, idx = np.zeros(0, np.int64), np.zeros(0, np.int64)

    def loop(settings, priors=None):
        nonlocal pos, idx
        while True:
            out = plan(settings, Export(), k, labels, Records(pos, idx, rewards[pos, idx]), priors)
            a, b = out.missing(Records(pos, idx, rewards[pos, idx]))
            if not len(a):
                return out
            pos, idx = np.concatenate([pos, a]), np.concatenate([idx, b])

    loop(replace(BAYES, mode="exact", bayes_from=0, stop_at=4))
    n = np.bincount(pos, minlength=tasks)
    c = np.bincount(pos, weights=rewards[pos, idx], minlength=tasks).astype(np.int64)
    tests = streak_tests(labels[pos], pos, idx, rewards[pos, idx] >= 1, [2, 4])
    streaky = {lbl for lbl, t in tests.items() if t.streaky}
    priors = fit_label_priors(n, c, labels, {"a": True}, streaky=streaky)
    every = np.repeat(np.arange(tasks), K), np.tile(np.arange(K), tasks)
    at_k = AdaptiveSettings("exact", first=K, round_size=2, group_size=8)
    fixed = plan(at_k, Export(), k, labels, Records(*every, rewards[every])).keep
    out = loop(BAYES, priors)
    return float((out.keep == fixed).mean()), priors["a"].stop_mode, tests["a"]


def test_streaks_make_the_label_exact_and_independent_rollouts_keep_bayes():
    rng = np.random.default_rng(7)
    p = rng.beta(0.5, 0.5, 1000)
    agree, mode, test = _run(_markov(rng, p, 0.7))
    assert test.p_value < STREAK_ALPHA and mode == "exact"
    assert agree == 1.0  # the exact test: fixed K's decisions
    agree, mode, test = _run((rng.random((1000, K)) < p[:, None]).astype(float))
    assert test.p_value >= STREAK_ALPHA and mode == "bayes"
    assert agree >= 0.98

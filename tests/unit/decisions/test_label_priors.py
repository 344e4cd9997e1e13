"""Priors that carry their uncertainty (grid EM, shrinkage toward the pool, candidates the first
round cannot rule out), 0/1 as a property of the label, and the edge cases of the posterior."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from rewardprof.core.config import Config, Export
from rewardprof.decisions.audit.report import audit_report, detectable_flip_rate
from rewardprof.decisions.audit.sample import audit_mask, audit_of, audit_shares
from rewardprof.decisions.keep_rules import KEEP
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records, plan
from rewardprof.decisions.planning.stop_tests import keep_at
from rewardprof.decisions.priors.grid import GRID, fit_grid
from rewardprof.decisions.priors.label import LabelPrior, fit_label_priors
from rewardprof.decisions.priors.posterior import MixturePrior, Posterior, posterior, signal_root
from rewardprof.decisions.statistics.binomial import clopper_pearson
from rewardprof.stages.export import drop_reasons

K = 16
BAYES = AdaptiveSettings("bayes", first=4, round_size=2, delta=0.02)
# the default run's first round (README "A run"): pass counts out of 4 per label
DEFAULT_RUN = {"math": [0] * 6, "mcq": [0] * 5 + [1] * 2 + [4], "rg": [0] * 13 + [1, 1, 2]}


def test_signal_root_at_one_is_none_for_large_groups():
    # 1 - 2^(1-64) rounds to 1.0: the guard must not bisect to a spurious root
    assert signal_root(64, 1.0) is None
    assert Posterior(0, 0, 1, 1000, 1002).prob_signal_at_least(64, 1.0) == 0.0


def test_prior_without_beta_weight_given_mixed_data_is_finite():
    post = posterior(MixturePrior(0.5, 0.5, 1.0, 1.0), 4, 2)
    assert (post.pi0, post.pi1, post.pib) == (0.0, 0.0, 1.0)
    assert math.isfinite(post.mean()) and post.mean() == pytest.approx(0.5)


def _rec(rewards_per_task: list[list[float]]) -> Records:
    pos = np.concatenate([[i] * len(r) for i, r in enumerate(rewards_per_task)]).astype(np.int64)
    idx = np.concatenate([np.arange(len(r)) for r in rewards_per_task]).astype(np.int64)
    return Records(pos, idx, np.concatenate(rewards_per_task).astype(float))


def test_a_task_at_k_with_failures_gets_the_export_decision():
    """Under bayes, rewards [0, 0, 0, failed] at K = 4: one decision, the export's."""
    prior = fit_label_priors(np.full(40, 4), np.arange(40) % 5, np.full(40, "a"), {"a": True})
    k, labels = np.array([4]), np.array(["a"], dtype=object)
    p = plan(BAYES, Export(), k, labels, _rec([[0.0, 0.0, 0.0, np.nan]]), prior)
    assert p.done[0] and not p.stopped_early[0]
    profile = pa.table(
        {
            "num_rollouts": [3],
            "expected_num_rollouts": [4],
            "num_passed": [0],
            "pass_rate": [0.0],
            "num_distinct_rewards": [1],
            "min/reward": [0.0],
            "max/reward": [0.0],
            "stopped_early": [bool(p.stopped_early[0])],
            "adaptive_keep": [bool(p.keep[0])],
        }
    )
    cfg = Config.model_validate({"entries": [{"label": "a", "environment": "math", "source": "x"}]})
    export_keeps = drop_reasons(cfg, profile)[0] == KEEP
    assert bool(p.keep[0]) == export_keeps  # undecided_by_failures, kept per on_undecided


def test_partial_credit_label_never_stops_a_zero_prefix_on_the_pass_predictive():
    # task 1's first round shows 0.5: the label is partial credit, so task 0's four 0s do not
    # settle "drop" (a later 0.5 would make it varied, hence kept at K)
    rewards = [[0.0] * 4, [0.5, 0.0, 0.0, 0.0]]
    fitted = fit_label_priors(np.full(40, 4), np.zeros(40), np.full(40, "a"), {"a": True})
    prior = {"a": LabelPrior(**{**fitted["a"].__dict__, "binary": False, "stop_mode": "exact"})}
    k, labels = np.array([K, K]), np.array(["a", "a"], dtype=object)
    p = plan(BAYES, Export(), k, labels, _rec(rewards), prior)
    assert not p.done[0] and p.planned[0] > 4


def test_small_labels_use_the_pooled_prior_and_the_exact_test():
    labels = np.concatenate([[lbl] * len(c) for lbl, c in DEFAULT_RUN.items()])
    c = np.concatenate(list(DEFAULT_RUN.values()))
    priors = fit_label_priors(np.full(len(c), 4), c, labels, {lbl: True for lbl in DEFAULT_RUN})
    for lbl in ("math", "mcq"):
        assert priors[lbl].source == "pooled" and priors[lbl].stop_mode == "exact"
        # the pooled prior keeps real mass at (or next to) p = 0: a 0/4 task may never pass
        assert priors[lbl].point.w[GRID < 0.01].sum() > 0.3


def test_grid_em_recovers_an_off_family_shape_and_shrinks_small_labels():
    rng = np.random.default_rng(0)
    p = rng.choice([0.0, 0.03, 0.6], size=3000)
    passes = (rng.random((3000, 16)) < p[:, None]).sum(axis=1)
    fit = fit_grid(np.full(3000, 16), passes)
    near = lambda lo, hi: fit.w[(lo <= GRID) & (hi >= GRID)].sum()  # noqa: E731
    assert near(0.0, 0.0) + near(0.001, 0.08) == pytest.approx(2 / 3, abs=0.03)
    assert near(0.5, 0.7) == pytest.approx(1 / 3, abs=0.03)
    # 3 tasks shrunk toward a pool with no mass above 0.1 stay mostly near the pool
    pool = fit_grid(np.full(3000, 16), np.where(p > 0.5, 0, passes))
    small = fit_grid(np.full(3, 4), np.array([3, 3, 3]), pool.w, 10.0)
    assert small.w[GRID > 0.5].sum() < 0.35


def _simulate(p: np.ndarray, seed: int, first_round: int = 4):
    rng = np.random.default_rng(seed)
    passes = (rng.random((len(p), K)) < p[:, None]).astype(float)
    labels = np.full(len(p), "a", dtype=object)
    first = passes[:, :first_round].sum(axis=1).astype(int)
    priors = fit_label_priors(np.full(len(p), first_round), first, labels, {"a": True})
    pos = idx = np.zeros(0, np.int64)
    while True:
        rec = Records(pos, idx, passes[pos, idx])
        out = plan(BAYES, Export(), np.full(len(p), K), labels, rec, priors)
        if out.done.all():
            fixed = keep_at(Export(), K, passes.sum(axis=1).astype(int), 8)
            return out, fixed, priors["a"]
        a, b = out.missing(rec)
        pos, idx = np.concatenate([pos, a]), np.concatenate([idx, b])


def test_bayes_agrees_on_an_off_family_label_and_saves_rollouts():
    p = np.random.default_rng(5).choice([0.0, 0.03, 0.6], size=600)
    out, fixed, prior = _simulate(p, 6)
    assert prior.stop_mode == "bayes" and len(prior.candidates) > 1
    assert (out.keep == fixed).mean() >= 0.98
    assert out.planned.sum() < 0.9 * K * len(p)


def test_a_label_below_the_minimum_runs_the_exact_test_and_agrees_fully():
    p = np.random.default_rng(7).choice([0.0, 0.03, 0.6], size=10)
    out, fixed, prior = _simulate(p, 8)
    assert prior.stop_mode == "exact"
    assert (out.keep == fixed).all()


def test_clopper_pearson_matches_closed_forms():
    lo, hi = clopper_pearson(0, 10)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 10), abs=1e-6)
    lo, hi = clopper_pearson(10, 10)
    assert hi == 1.0 and lo == pytest.approx(0.025 ** (1 / 10), abs=1e-6)
    lo, hi = clopper_pearson(5, 10)
    assert lo == pytest.approx(0.1871, abs=1e-4) and hi == pytest.approx(0.8129, abs=1e-4)


def test_audit_sample_is_never_stopped_by_the_prior_and_reports_its_flip_rate():
    rng = np.random.default_rng(11)
    size = 400
    p = rng.choice([0.0, 0.03, 0.6], size=size)
    passes = (rng.random((size, K)) < p[:, None]).astype(float)
    labels = np.full(size, "a", dtype=object)
    ids = np.array([f"task-{i}" for i in range(size)], dtype=object)
    first = passes[:, :4].sum(axis=1).astype(int)
    fitted = fit_label_priors(np.full(size, 4), first, labels, {"a": True})
    share = audit_shares({"a": size}, minimum=30)["a"]  # a floor of 30, as a user may set
    assert share == pytest.approx(30 / size)
    priors = {"a": LabelPrior(**{**fitted["a"].__dict__, "audit_share": share})}
    audited = audit_of(ids, labels, priors)
    assert 15 <= audited.sum() <= 50  # ~30 by hash
    k = np.full(size, K)
    pos = idx = np.zeros(0, np.int64)
    while True:
        rec = Records(pos, idx, passes[pos, idx])
        out = plan(BAYES, Export(), k, labels, rec, priors, 1.0, audited)
        if out.done.all():
            break
        a, b = out.missing(rec)
        pos, idx = np.concatenate([pos, a]), np.concatenate([idx, b])
    # an audited task stops only where the rules settle it: exact's plan, task by task
    exact = plan(replace(BAYES, mode="exact"), Export(), k, labels, rec, priors, 1.0)
    assert (out.planned[audited] == exact.planned[audited]).all()
    assert (out.planned[audited] == K).any()
    replayed = plan(BAYES, Export(), k, labels, rec, priors)
    assert replayed.stopped_early[audited].any()  # the replay stops some audited tasks early
    by_prior = replayed.stopped_early & (out.planned > replayed.planned)
    report = audit_report(labels, audited, by_prior, replayed.keep, out.keep, BAYES.delta)
    overall = report["overall"]
    assert overall["audited_tasks"] == audited.sum()
    flips = audited & by_prior & (replayed.keep != out.keep)
    assert overall["flipped"] == flips.sum()
    lo, hi = overall["flip_rate_interval"]
    assert lo <= overall["flip_rate"] <= hi
    # a made-up run where every early decision flipped: the warning
    bad = audit_report(labels, audited, audited, ~out.keep, out.keep, BAYES.delta)
    assert bad["overall"]["exceeds_delta"] and len(bad["warnings"]) == 1
    # ~30 audited tasks cannot confirm a 2 % flip rate: the audit says it is too few to say
    assert overall["detectable_flip_rate"] > BAYES.delta and overall["too_few_to_say"]


def test_the_audit_is_a_budget_and_a_small_label_is_too_few_to_say():
    """Default: 3 % of each label, no floor (a 32-task label was audited whole). A sample
    catches a flip rate of 1 - 0.05^(1/n) with 95 % probability: 149 tasks stopping early can
    vouch for delta 0.02, 10 cannot."""
    assert audit_shares({"small": 32, "big": 5000}) == {"small": 0.03, "big": 0.03}
    ids = np.array([f"t{i}" for i in range(32)], dtype=object)
    audited = audit_mask(ids, np.full(32, "small", dtype=object), {"small": 0.03})
    assert audited.sum() <= 3
    assert detectable_flip_rate(149) < 0.02 < detectable_flip_rate(10)
    assert detectable_flip_rate(0) == 1.0
    labels = np.array(["small"] * 10 + ["big"] * 200, dtype=object)
    every = np.ones(210, dtype=bool)
    report = audit_report(labels, every, every, every, every, 0.02)
    small, big = report["labels"]["small"], report["labels"]["big"]
    assert small["too_few_to_say"] and not big["too_few_to_say"]
    assert small["detectable_flip_rate"] == pytest.approx(1 - 0.05 ** (1 / 10), abs=1e-6)


def test_partial_credit_label_agrees_with_fixed_k_under_bayes():
    rng = np.random.default_rng(13)
    size = 200
    u = rng.random(size)
    p = np.where(u < 0.5, 0.0, np.where(u < 0.7, 1.0, rng.random(size)))
    rewards = (rng.random((size, K)) < p[:, None]).astype(float)
    rewards = np.where(rng.random(rewards.shape) < 0.2, 0.5, rewards)
    labels = np.full(size, "a", dtype=object)
    first = rewards[:, :4]
    priors = fit_label_priors(
        np.full(size, 4),
        (first >= 1).sum(axis=1),
        labels,
        {"a": bool(np.isin(first, [0, 1]).all())},
    )
    assert priors["a"].stop_mode == "exact" and not priors["a"].binary
    k = np.full(size, K)
    pos = idx = np.zeros(0, np.int64)
    while True:
        rec = Records(pos, idx, rewards[pos, idx])
        out = plan(BAYES, Export(), k, labels, rec, priors)
        if out.done.all():
            break
        a, b = out.missing(rec)
        pos, idx = np.concatenate([pos, a]), np.concatenate([idx, b])
    every = np.repeat(np.arange(size), K), np.tile(np.arange(K), size)
    at_k = AdaptiveSettings("exact", first=K)
    fixed = plan(at_k, Export(), k, labels, Records(*every, rewards[every])).keep
    assert (out.keep == fixed).all() and out.stopped_early.any()

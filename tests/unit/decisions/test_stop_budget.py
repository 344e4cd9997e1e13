"""bayes spends delta where it saves the most, and never costs more than exact
(decisions/planning/stop_budget.py, decisions/planning/round_plan.py): the label's threshold is the
largest that keeps the expected share of flipped decisions within delta under every candidate prior;
a task outside the audit never gets more rollouts than exact gives it, and a task the rules
settle stops where exact stops it; the audit is an exact count, not a draw."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from rewardprof.core.config import Export
from rewardprof.decisions.audit.report import audit_report
from rewardprof.decisions.audit.sample import (
    audit_of,
    audit_shares,
    with_audit_cutoffs,
    with_audit_shares,
)
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records, plan
from rewardprof.decisions.planning.stop_budget import (
    Rounds,
    _forward,
    _states,
    expected_share,
    pooled_thresholds,
    stop_threshold,
    with_stop_thresholds,
)
from rewardprof.decisions.planning.stop_tests import keep_at
from rewardprof.decisions.priors.grid import GRID, GridPrior
from rewardprof.decisions.priors.label import LabelPrior, fit_label_priors
from rewardprof.manifest.load import validate_config
from rewardprof.stages.adaptive_settings import first_round_settings, settings_of
from rewardprof.stages.run_summary import _audit_lines

K = 16
BAYES = AdaptiveSettings("bayes", first=2, round_size=2, delta=0.02, group_size=8, bayes_from=4)
EXACT = AdaptiveSettings("exact", first=2, round_size=2, group_size=8)


def _prior(masses: dict[float, float]) -> GridPrior:
    w = np.zeros(len(GRID))
    for p, m in masses.items():
        w[int(np.argmin(np.abs(GRID - p)))] += m
    return GridPrior(tuple(w / w.sum()), 1000)


def test_rounds_are_the_planners():
    assert Rounds(16, 2, 2, 4).sizes() == [2, 4, 6, 8, 10, 12, 14, 16]
    assert Rounds(5, 2, 2, 4).sizes() == [2, 4, 5]
    assert Rounds(3, 4, 2, 4).sizes() == [3]


def test_the_threshold_spends_delta_and_no_more():
    # most never pass, some rarely, the rest half the time: a 0/n task is a "never" more
    # surely the longer it stays 0/n, and stopping it sooner risks more
    cands = (_prior({0.0: 0.6, 0.05: 0.1, 0.5: 0.3}),)
    rounds = Rounds(K, 2, 2, 4)
    tau = stop_threshold(Export(), cands, rounds, 8, 0.02)
    assert tau > 0
    states = _states(Export(), cands, rounds, 8, "", None)
    flips, share = _forward(states, cands, rounds, tau)
    assert flips.max() <= 0.02
    # the next larger threshold would spend more than delta: tau is the largest that fits
    larger = sorted(s.p_flip for s in states if not s.settled and s.n >= 4 and tau < s.p_flip < 0.5)
    assert larger and _forward(states, cands, rounds, larger[0])[0].max() > 0.02
    # and it saves: fewer rollouts than exact's rounds (tau = -1: no stop by the prior)
    assert share[0] < expected_share(Export(), cands, rounds, 8, -1.0) - 0.2


def test_every_candidate_must_fit_the_allowance():
    point = _prior({0.0: 0.7, 0.5: 0.3})
    rare = _prior({0.0: 0.4, 0.03: 0.3, 0.5: 0.3})  # "rarely passes" instead of "never"
    rounds = Rounds(K, 2, 2, 4)
    alone = stop_threshold(Export(), (point,), rounds, 8, 0.02)
    both = stop_threshold(Export(), (point, rare), rounds, 8, 0.02)
    assert both < alone
    states = _states(Export(), (point, rare), rounds, 8, "", None)
    assert _forward(states, (point, rare), rounds, both)[0].max() <= 0.02


def test_several_priors_share_the_allowance_each_with_its_own_threshold():
    """A warm start's keys: a large group that is surely "never" (earlier 0/16) beside a small
    one whose candidates disagree. One threshold for both stopped where the pessimistic key's
    flips ran out; each key's own threshold lets the sure group stop, within delta overall."""
    rounds = Rounds(K, 2, 2, 4)
    sure = (_prior({0.0: 0.99, 0.5: 0.01}), _prior({0.0: 0.97, 0.03: 0.02, 0.5: 0.01}))
    unsure = (_prior({0.0: 0.7, 0.5: 0.3}), _prior({0.0: 0.3, 0.03: 0.4, 0.5: 0.3}))
    parts = [(0.8, sure, None), (0.2, unsure, None)]
    taus = pooled_thresholds(Export(), parts, rounds, 8, 0.02)
    assert len(taus) == 2 and taus[0] > 0
    spent, saved = 0.0, 0.0
    for (share, cands, _), tau in zip(parts, taus, strict=True):
        states = _states(Export(), cands, rounds, 8, "", None)
        flips, used = _forward(states, cands, rounds, tau)
        spent += share * flips.max()
        saved += share * (expected_share(Export(), cands, rounds, 8, -1.0) - used[0])
    assert spent <= 0.02 and saved > 0.3
    # nothing left to give: each key's next larger threshold would overspend
    for j, ((share, cands, _), tau) in enumerate(zip(parts, taus, strict=True)):
        states = _states(Export(), cands, rounds, 8, "", None)
        options = sorted(s.p_flip for s in states if not s.settled and s.n >= 4 and s.p_flip < 0.5)
        nxt = [t for t in options if t > tau]
        if nxt:
            more = share * _forward(states, cands, rounds, nxt[0])[0].max()
            mine = share * _forward(states, cands, rounds, tau)[0].max()
            assert spent - mine + more > 0.02 or more == mine, j
    # one prior alone: the largest threshold that fits, as stop_threshold gives it
    assert pooled_thresholds(Export(), parts[:1], rounds, 8, 0.02) == [
        stop_threshold(Export(), sure, rounds, 8, 0.02)
    ]


def _loop(settings, outcomes, k, labels, priors=None, audit=None, start=None):
    pos, idx = start if start is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    while True:
        rec = Records(pos, idx, outcomes[pos, idx])
        p = plan(settings, Export(), k, labels, rec, priors, 1.0, audit)
        a, b = p.missing(rec)
        if not len(a):
            return p, pos, idx
        pos, idx = np.concatenate([pos, a]), np.concatenate([idx, b])


def _bayes(outcomes, audit_share=0.0):
    size = len(outcomes)
    k, labels = np.full(size, K), np.full(size, "a", dtype=object)
    first = replace(BAYES, mode="exact", bayes_from=0, stop_at=4)
    _, pos, idx = _loop(first, outcomes, k, labels)
    n = np.bincount(pos, minlength=size)
    c = np.bincount(pos, weights=outcomes[pos, idx], minlength=size).astype(np.int64)
    priors = fit_label_priors(n, c, labels, {"a": True})
    priors = with_stop_thresholds(priors, labels, k, labels, BAYES, Export())
    audit = None
    if audit_share:
        ids = np.array([f"t{i}" for i in range(size)], dtype=object)
        priors = with_audit_shares(priors, audit_shares({"a": size}, audit_share), "salt")
        priors = with_audit_cutoffs(priors, ids, labels)
        audit = audit_of(ids, labels, priors)
    return _loop(BAYES, outcomes, k, labels, priors, audit, (pos, idx))[0], priors, audit


def _mix(seed: int, size: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    u = rng.random(size)
    p = np.where(u < 0.5, 0.0, np.where(u < 0.7, 1.0, rng.random(size)))
    return (rng.random((size, K)) < p[:, None]).astype(float)


@pytest.mark.parametrize("seed", [1, 2])
def test_bayes_never_costs_more_than_exact_and_spends_delta(seed):
    outcomes = _mix(seed, 600)
    size = len(outcomes)
    k, labels = np.full(size, K), np.full(size, "a", dtype=object)
    exact, _, _ = _loop(EXACT, outcomes, k, labels)
    bayes, priors, _ = _bayes(outcomes)
    assert priors["a"].stop_thresholds[K] > 0
    assert (bayes.planned <= exact.planned).all()
    # where the prior stopped nothing, bayes is exact: the same rollouts and decision
    same = bayes.planned == exact.planned
    assert (bayes.keep[same] == exact.keep[same]).all()
    fixed = keep_at(Export(), K, outcomes.sum(axis=1).astype(int), 8)
    assert float((bayes.keep != fixed).mean()) <= 0.02
    # delta is spent, not hoarded: the worst candidate expects flips near it
    rounds = Rounds(K, 2, 2, 4)
    cands = priors["a"].candidates
    states = _states(Export(), cands, rounds, 8, "a", None)
    expected = _forward(states, cands, rounds, priors["a"].stop_thresholds[K])[0].max()
    assert 0.005 < expected <= 0.02
    assert bayes.planned.sum() < exact.planned.sum() * 0.95


def test_an_audited_task_is_never_stopped_by_the_prior():
    outcomes = _mix(3, 600)
    size = len(outcomes)
    k, labels = np.full(size, K), np.full(size, "a", dtype=object)
    exact, _, _ = _loop(EXACT, outcomes, k, labels)
    bayes, _, audit = _bayes(outcomes, audit_share=0.05)
    assert audit.sum() == 30  # floor(0.05 x 600): an exact count
    assert (bayes.planned[audit] == exact.planned[audit]).all()


def test_the_audit_count_is_the_budget_and_the_salt_picks_the_tasks():
    labels = np.array(["small"] * 32 + ["mid"] * 120 + ["big"] * 1000, dtype=object)
    ids = np.array([f"t{i}" for i in range(len(labels))], dtype=object)
    cands = (_prior({0.0: 0.5, 0.5: 0.5}),)
    priors = {
        lbl: LabelPrior(100, "label", True, "bayes", cands) for lbl in ("small", "mid", "big")
    }
    sizes = {"small": 32, "mid": 120, "big": 1000}
    picked = []
    for salt in ("run-1", "run-2"):
        salted = with_audit_shares(priors, audit_shares(sizes, 0.03), salt)
        audited = audit_of(ids, labels, with_audit_cutoffs(salted, ids, labels))
        counts = {lbl: int(audited[labels == lbl].sum()) for lbl in sizes}
        assert counts == {"small": 0, "mid": 3, "big": 30}  # floor(0.03 x tasks)
        picked.append(set(np.flatnonzero(audited)))
    assert picked[0] != picked[1]  # another run (checkpoint) audits other tasks


def _defaults():
    """The planner's settings of a bayes run at the shipped defaults."""
    cfg = validate_config(
        {
            "run": "r",
            "entries": [{"label": "a", "environment": "math", "source": "a.jsonl"}],
            "adaptive": {"mode": "bayes"},
        }
    )
    return cfg, settings_of(cfg), first_round_settings(cfg)


def test_a_120_task_label_costs_at_most_060_of_fixed_k_audit_included():
    cfg, settings, first = _defaults()
    assert (settings.first, settings.bayes_from, first.stop_at) == (2, 4, 4)
    rng = np.random.default_rng(42)
    size = 120
    outcomes = (rng.random((size, K)) < rng.beta(0.5, 0.5, size)[:, None]).astype(float)
    k, labels = np.full(size, K), np.full(size, "a", dtype=object)
    ids = np.array([f"t{i}" for i in range(size)], dtype=object)
    _, pos, idx = _loop(first, outcomes, k, labels)
    n = np.bincount(pos, minlength=size)
    c = np.bincount(pos, weights=outcomes[pos, idx], minlength=size).astype(np.int64)
    priors = fit_label_priors(n, c, labels, {"a": True})
    share = cfg.adaptive.audit_share
    priors = with_audit_shares(priors, audit_shares({"a": size}, share), "salt")
    priors = with_stop_thresholds(priors, labels, k, labels, settings, cfg.export)
    priors = with_audit_cutoffs(priors, ids, labels)
    audit = audit_of(ids, labels, priors)
    assert audit.sum() == 3  # floor(0.03 x 120)
    bayes, _, _ = _loop(settings, outcomes, k, labels, priors, audit, (pos, idx))
    exact, _, _ = _loop(EXACT, outcomes, k, labels)
    fixed = keep_at(cfg.export, K, outcomes.sum(axis=1).astype(int), 8)
    used = bayes.planned.sum() / (size * K)
    assert used <= 0.60 and bayes.planned.sum() < exact.planned.sum()
    assert (bayes.keep == fixed).mean() >= 0.98


def test_a_32_task_label_audit_costs_nothing_and_says_it_is_too_small():
    labels = np.full(32, "small", dtype=object)
    ids = np.array([f"t{i}" for i in range(32)], dtype=object)
    cands = (_prior({0.0: 0.5, 0.5: 0.5}),)
    priors = {"small": LabelPrior(32, "label", True, "bayes", cands)}
    priors = with_audit_shares(priors, audit_shares({"small": 32}, 0.03), "salt")
    audited = audit_of(ids, labels, with_audit_cutoffs(priors, ids, labels))
    assert audited.sum() == 0  # floor(0.03 x 32): no rollout spent on an audit
    stopped = np.zeros(32, bool)
    report = audit_report(labels, audited, stopped, stopped, stopped, 0.02, np.zeros(32))
    small = report["labels"]["small"]
    assert small["extra_rollouts"] == 0 and small["too_few_to_say"]
    saved = {"audited_tasks": 0, "extra_rollouts": 0, "stopped_early": 0, "agreed": 0}
    saved |= {"too_few_to_say": {"small": small}, "flip_rate_interval": [0.0, 1.0]}
    lines = _audit_lines(saved, sent=256)
    assert "costing 0 rollouts (0.0 % of those sent)" in lines[0]
    assert lines[-1].startswith("adaptive: audit of label small: 0 tasks")
    assert lines[-1].endswith(
        "too few to say (it would catch a flip rate of 1.00 or more, not delta's)"
    )

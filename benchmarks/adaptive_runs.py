"""Adaptive runs in process, as the workflow makes them, and their exports.

`bayes_run` follows the workflow's steps with the package's functions: the first round (exact's
rounds up to min_rollouts: stages/adaptive_settings.first_round_settings), the labels'
priors fitted on it with the audit share and each label's stopping threshold
(stop_budget.with_stop_thresholds), then the rounds, audited tasks never stopped by the prior.
`exact_run` is exact's rounds. `export_keep` puts a run's rollouts and plan through the profile
and export stages' own functions (task_profile, the export's drop reasons): what is compared
with fixed K is what a user exports, not the planner's own decision.
"""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa

from rewardprof.core.config import Export, Profile
from rewardprof.decisions.audit.sample import (
    AUDIT_SHARE,
    audit_of,
    audit_shares,
    with_audit_cutoffs,
    with_audit_shares,
)
from rewardprof.decisions.keep_rules import KEEP
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records, plan
from rewardprof.decisions.planning.stop_budget import with_stop_thresholds
from rewardprof.decisions.planning.streaks import round_ends, streak_tests
from rewardprof.decisions.priors.label import fit_label_priors
from rewardprof.stages.export import _reasons
from rewardprof.stages.profile import task_profile
from rewardprof.testing.outcome_tables import plans_table, rollouts_table, tasks_table

MIN_ROLLOUTS = 4
ROUND = 2
GROUP_SIZE = 8


def rounds(settings, ex, outcomes, k, labels, priors=None, audit=None, start=None):
    """The rollout stage's loop: plan, sample what is missing, repeat; (plan, pos, idx)."""
    pos, idx = start if start is not None else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    while True:
        records = Records(pos, idx, outcomes[pos, idx])
        p = plan(settings, ex, k, labels, records, priors, 1.0, audit)
        new_pos, new_idx = p.missing(records)
        if not len(new_pos):
            return p, pos, idx
        pos, idx = np.concatenate([pos, new_pos]), np.concatenate([idx, new_idx])


def exact_run(outcomes, k, labels, ex: Export):
    settings = AdaptiveSettings("exact", ROUND, ROUND, group_size=GROUP_SIZE)
    return rounds(settings, ex, outcomes, k, labels)


def bayes_run(
    outcomes, k, labels, ex: Export, delta=0.02, audit_share=AUDIT_SHARE, salt="run", ids=None
):
    """(plan, pos, idx, audit mask or None, priors) of a bayes run at the defaults (the
    module doc)."""
    settings = AdaptiveSettings("bayes", ROUND, ROUND, delta, GROUP_SIZE, bayes_from=MIN_ROLLOUTS)
    first = replace(settings, mode="exact", bayes_from=0, stop_at=MIN_ROLLOUTS)
    _, pos, idx = rounds(first, ex, outcomes, k, labels)
    ok = ~np.isnan(outcomes[pos, idx])
    n = np.bincount(pos[ok], minlength=len(k))
    c = np.bincount(pos[ok], weights=outcomes[pos[ok], idx[ok]] >= 1.0, minlength=len(k))
    reward = outcomes[pos[ok], idx[ok]]
    binary = {
        lbl: bool(np.isin(reward[labels[pos[ok]] == lbl], [0.0, 1.0]).all())
        for lbl in pd.unique(labels)
    }
    # as the prior job: a label whose first round shows streaks gets the exact test
    tests = streak_tests(
        labels[pos[ok]],
        pos[ok],
        idx[ok],
        outcomes[pos[ok], idx[ok]] >= 1,
        round_ends(ROUND, ROUND, MIN_ROLLOUTS),
    )
    streaky = {lbl for lbl, t in tests.items() if t.streaky}
    priors = fit_label_priors(n, c.astype(np.int64), labels, binary, streaky=streaky)
    sizes = {lbl: int((labels == lbl).sum()) for lbl in pd.unique(labels)}
    priors = with_audit_shares(priors, audit_shares(sizes, audit_share), salt)
    priors = with_stop_thresholds(priors, labels, k, labels, settings, ex)
    if ids is None:
        ids = np.array([f"task-{i}" for i in range(len(k))], dtype=object)
    priors = with_audit_cutoffs(priors, ids, labels)
    audit = audit_of(ids, labels, priors)
    p, pos, idx = rounds(settings, ex, outcomes, k, labels, priors, audit, (pos, idx))
    return p, pos, idx, audit, priors


def export_keep(ex: Export, outcomes, k, labels, pos, idx, p=None) -> np.ndarray:
    """Per task: the export keeps it (the profile and export stages' functions)."""
    tasks, rollouts = tasks_table(k, labels), rollouts_table(outcomes, pos, idx)
    plans = plans_table(p) if p is not None else None
    cfg = SimpleNamespace(profile=Profile(group_size=GROUP_SIZE), export=ex)
    prof = task_profile(cfg, tasks, rollouts, plans)
    reasons, _ = _reasons(cfg, pa.Table.from_pandas(prof, preserve_index=False))
    return reasons == KEEP


def fixed_keep(outcomes, k, labels, ex: Export) -> np.ndarray:
    every = [(t, r) for t in range(len(k)) for r in range(int(k[t]))]
    pos, idx = (np.array(x, dtype=np.int64) for x in zip(*every, strict=True))
    return export_keep(ex, outcomes, k, labels, pos, idx)

"""The audit sample of adaptive `bayes`: tasks that always run to K, so a run measures what
stopping early cost it.

Which tasks: a fixed share of each label (AUDIT_SHARE, at least AUDIT_MIN tasks: 0 by default,
the share is a budget, not a floor; at most the whole label), chosen by a hash of task_id:
deterministic, independent of the shard layout and of the order rollouts arrive in. The share
per label is fixed when the priors are fitted (that job sees every task) and recorded in
adaptive/prior.json; a shard then marks its own tasks by hash alone.

What is measured (`audit_report`): for every audited task, the decision the planner would have
made without the audit (replayed on the task's own rollouts: its prefix is exactly what a
non-audited task would have had) against the decision at K. A flip is an audited task that
would have stopped early with a decision other than the one at K. The flip rate is flips over
audited tasks that would have stopped early (what delta bounds), with an exact binomial
(Clopper-Pearson) interval; the predicted rate is the planner's own bound, delta. When the
interval's lower end exceeds delta the stopping rule did worse than it promised on this run:
a warning, not a failure. `detectable_flip_rate`: the smallest flip rate the sample would catch
(one flip or more) with 95 % probability, 1 - 0.05^(1/n) over n audited tasks that would have
stopped early; above delta the label's audit is `too_few_to_say`: it cannot confirm the promise,
only catch a rate that large.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pandas as pd

from rewardprof.decisions.betafn import betainc, bisect

AUDIT_SHARE = 0.03
AUDIT_MIN = 0
CONFIDENCE = 0.95


def audit_shares(
    tasks_per_label: dict[str, int], share: float = AUDIT_SHARE, minimum: int = AUDIT_MIN
) -> dict[str, float]:
    """label -> the share of its tasks audited: `share`, raised so that about `minimum` tasks
    are audited, at most all of them."""
    return {
        label: (min(1.0, max(share, minimum / size)) if size else 1.0)
        for label, size in tasks_per_label.items()
    }


def audit_unit(task_ids) -> np.ndarray:
    """A uniform number in [0, 1) per task_id (the first 8 bytes of its BLAKE2b hash)."""
    out = np.empty(len(task_ids))
    for i, tid in enumerate(task_ids):
        digest = hashlib.blake2b(str(tid).encode(), digest_size=8).digest()
        out[i] = int.from_bytes(digest, "big") / 2.0**64
    return out


def audit_mask(task_ids, labels, shares: dict[str, float]) -> np.ndarray:
    """Per task: audited (runs to K)."""
    share = pd.Series(np.asarray(labels, dtype=object)).map(shares).fillna(0.0).to_numpy(float)
    return audit_unit(task_ids) < share


def with_audit_shares(priors: dict, shares: dict[str, float]) -> dict:
    """The LabelPriors with their audit share; 0 for a label that gets the exact test (its
    decisions equal the fixed-K ones by construction: nothing to audit)."""
    return {
        lbl: replace(p, audit_share=shares[lbl] if p.stop_mode == "bayes" else 0.0)
        for lbl, p in priors.items()
    }


def audit_of(task_ids, labels, priors: dict | None) -> np.ndarray | None:
    """Per task: audited, from the labels' LabelPrior.audit_share (None: no audit)."""
    shares = {lbl: getattr(p, "audit_share", 0.0) for lbl, p in (priors or {}).items()}
    if not any(shares.values()):
        return None
    return audit_mask(task_ids, labels, shares)


def clopper_pearson(flips: int, total: int, level: float = CONFIDENCE) -> tuple[float, float]:
    """Exact binomial interval for flips / total (Beta quantiles of the binomial tails)."""
    if total == 0:
        return 0.0, 1.0
    tail = (1.0 - level) / 2
    lo = 0.0 if flips == 0 else _beta_quantile(tail, flips, total - flips + 1)
    hi = 1.0 if flips == total else _beta_quantile(1.0 - tail, flips + 1, total - flips)
    return lo, hi


def detectable_flip_rate(stopped: int, level: float = CONFIDENCE) -> float:
    """The smallest flip rate that `stopped` audited tasks would show at least once with
    probability `level` (1.0 for none)."""
    return 1.0 - (1.0 - level) ** (1.0 / stopped) if stopped else 1.0


def _beta_quantile(q: float, a: float, b: float) -> float:
    return bisect(lambda x: betainc(a, b, x), q, 0.0, 1.0)


def audit_report(
    labels: np.ndarray,
    audited: np.ndarray,
    would_stop: np.ndarray,
    early_keep: np.ndarray,
    keep_at_k: np.ndarray,
    delta: float,
    extra: np.ndarray | None = None,
) -> dict:
    """Per label and overall (see the module doc); arrays are per task of the run. `extra`:
    per task, the rollouts it got beyond what its plan without the audit needed (the audit's
    cost)."""
    labels = np.asarray(labels, dtype=object)
    extra = np.zeros(len(labels), np.int64) if extra is None else np.asarray(extra, np.int64)
    flip = audited & would_stop & (np.asarray(early_keep) != np.asarray(keep_at_k))

    def part(rows: np.ndarray) -> dict:
        stopped = int((audited & would_stop & rows).sum())
        flips = int((flip & rows).sum())
        lo, hi = clopper_pearson(flips, stopped)
        return {
            "audited_tasks": int((audited & rows).sum()),
            "extra_rollouts": int(extra[audited & rows].sum()),
            "would_stop_early": stopped,
            "flipped": flips,
            "flip_rate": flips / stopped if stopped else None,
            "flip_rate_interval": [round(lo, 6), round(hi, 6)],
            "predicted_flip_rate_at_most": delta,
            "exceeds_delta": bool(stopped and lo > delta),
            "detectable_flip_rate": round(detectable_flip_rate(stopped), 6),
            "too_few_to_say": detectable_flip_rate(stopped) > delta,
        }

    by_label = {str(lbl): part(labels == lbl) for lbl in pd.unique(labels)}
    overall = part(np.ones(len(labels), dtype=bool))
    warnings = [
        f"adaptive audit: label {lbl}: {r['flipped']} of {r['would_stop_early']} audited tasks "
        f"stopped early would have flipped (95 % interval {r['flip_rate_interval']}) against "
        f"delta {delta}: decisions of tasks stopped early are less reliable than promised"
        for lbl, r in by_label.items()
        if r["exceeds_delta"]
    ]
    return {"delta": delta, "labels": by_label, "overall": overall, "warnings": warnings}

"""The audit's report: what stopping by the prior cost a run, measured on the audit sample
(decisions/audit/sample.py).

What is measured (`audit_report`): for every audited task, the decision the planner would have
made without the audit (replayed on the task's own rollouts: its prefix is exactly what a
non-audited task would have had) against the decision the rules settled (that of K). A flip is
an audited task the prior would have stopped with a decision other than that one. The flip
rate is flips over audited tasks: the share of the label's tasks whose decision differs from
fixed K's, what delta bounds (decisions/planning/stop_budget.py), with an exact binomial
(Clopper-Pearson) interval; the predicted rate is at most delta. When the interval's lower end
exceeds delta the stopping rule did worse than it promised on this run: a warning, not a
failure. `detectable_flip_rate`: the smallest flip rate the sample would catch (one flip or
more) with 95 % probability, 1 - 0.05^(1/n) over n audited tasks; above delta the label's audit
is `too_few_to_say`: it cannot confirm the promise, only catch a rate that large. `overall`
weighs each label by its tasks (a label audited at a larger share counts for its size, not for
its sample).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rewardprof.decisions.statistics.binomial import CONFIDENCE, clopper_pearson


def detectable_flip_rate(stopped: int, level: float = CONFIDENCE) -> float:
    """The smallest flip rate that `stopped` audited tasks would show at least once with
    probability `level` (1.0 for none)."""
    return 1.0 - (1.0 - level) ** (1.0 / stopped) if stopped else 1.0


def _weighted_rate(by_label: dict[str, dict]) -> float | None:
    """The run's flip rate: each audited label's rate weighted by its number of tasks."""
    sized = [(r["tasks"], r["flip_rate"]) for r in by_label.values() if r["flip_rate"] is not None]
    total = sum(t for t, _ in sized)
    return sum(t * rate for t, rate in sized) / total if total else None


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
        n = int((audited & rows).sum())
        flips = int((flip & rows).sum())
        lo, hi = clopper_pearson(flips, n)
        return {
            "tasks": int(rows.sum()),
            "audited_tasks": n,
            "extra_rollouts": int(extra[audited & rows].sum()),
            "would_stop_early": int((audited & would_stop & rows).sum()),
            "flipped": flips,
            "flip_rate": flips / n if n else None,
            "flip_rate_interval": [round(lo, 6), round(hi, 6)],
            "predicted_flip_rate_at_most": delta,
            "exceeds_delta": bool(n and lo > delta),
            "detectable_flip_rate": round(detectable_flip_rate(n), 6),
            "too_few_to_say": detectable_flip_rate(n) > delta,
        }

    by_label = {str(lbl): part(labels == lbl) for lbl in pd.unique(labels)}
    overall = part(np.ones(len(labels), dtype=bool))
    overall["flip_rate"] = _weighted_rate(by_label)
    warnings = [
        f"adaptive audit: label {lbl}: {r['flipped']} of {r['would_stop_early']} audited tasks "
        f"stopped early would have flipped (95 % interval {r['flip_rate_interval']}) against "
        f"delta {delta}: decisions of tasks stopped early are less reliable than promised"
        for lbl, r in by_label.items()
        if r["exceeds_delta"]
    ]
    return {"delta": delta, "labels": by_label, "overall": overall, "warnings": warnings}

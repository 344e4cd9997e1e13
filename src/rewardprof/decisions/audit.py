"""The audit sample of adaptive `bayes`: tasks the prior never stops (they run until the keep
rules settle them, at K at the latest), so a run measures what stopping by the prior cost it.

Which tasks: a fixed share of each label (AUDIT_SHARE, at least AUDIT_MIN tasks: 0 by default,
the share is a budget, not a floor; at most the whole label), chosen by a hash of task_id:
deterministic, independent of the shard layout and of the order rollouts arrive in, and salted
per run (the run's generation key: another checkpoint audits other tasks). The share and salt
per label are fixed when the priors are fitted (that job sees every task) and recorded in
adaptive/prior.json; a shard then marks its own tasks by hash alone.

What is measured (`audit_report`): for every audited task, the decision the planner would have
made without the audit (replayed on the task's own rollouts: its prefix is exactly what a
non-audited task would have had) against the decision the rules settled (that of K). A flip is
an audited task the prior would have stopped with a decision other than that one. The flip
rate is flips over audited tasks: the share of the label's tasks whose decision differs from
fixed K's, what delta bounds (decisions/stop_budget.py), with an exact binomial
(Clopper-Pearson) interval; the predicted rate is at most delta. When the interval's lower end
exceeds delta the stopping rule did worse than it promised on this run: a warning, not a
failure. `detectable_flip_rate`: the smallest flip rate the sample would catch (one flip or
more) with 95 % probability, 1 - 0.05^(1/n) over n audited tasks; above delta the label's audit
is `too_few_to_say`: it cannot confirm the promise, only catch a rate that large. `overall`
weighs each label by its tasks (a label audited at a larger share counts for its size, not for
its sample).
"""

from __future__ import annotations

import hashlib
import math
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


def audit_unit(task_ids, salt: str = "") -> np.ndarray:
    """A uniform number in [0, 1) per task_id (the first 8 bytes of its BLAKE2b hash, keyed by
    `salt`)."""
    out = np.empty(len(task_ids))
    key = salt.encode()[:64]
    for i, tid in enumerate(task_ids):
        digest = hashlib.blake2b(str(tid).encode(), digest_size=8, key=key).digest()
        out[i] = int.from_bytes(digest, "big") / 2.0**64
    return out


def audit_mask(task_ids, labels, shares: dict[str, float], salt: str = "") -> np.ndarray:
    """Per task: audited (never stopped by the prior)."""
    share = pd.Series(np.asarray(labels, dtype=object)).map(shares).fillna(0.0).to_numpy(float)
    return audit_unit(task_ids, salt) < share


def with_audit_shares(priors: dict, shares: dict[str, float], salt: str = "") -> dict:
    """The LabelPriors with their audit share and salt; share 0 for a label that gets the
    exact test (its decisions equal the fixed-K ones by construction: nothing to audit)."""
    return {
        lbl: replace(p, audit_share=shares[lbl] if p.stop_mode == "bayes" else 0.0, audit_salt=salt)
        for lbl, p in priors.items()
    }


def with_audit_cutoffs(priors: dict, task_ids, labels) -> dict:
    """The LabelPriors with their audit cutoff: a label's audit is exactly floor(audit_share x
    its tasks) of them, those with the smallest salted hash (the share alone would audit a
    random number: 0-3 tasks of a 32-task label at 3 %). The cutoff (the largest audited hash)
    is recorded, so a shard marks its own tasks without seeing the others."""
    labels = np.asarray(labels, dtype=object)
    out = dict(priors)
    for lbl in pd.unique(labels):
        p = priors.get(lbl)
        if p is None or not getattr(p, "audit_share", 0.0):
            continue
        units = np.sort(audit_unit(np.asarray(task_ids, dtype=object)[labels == lbl], p.audit_salt))
        count = min(len(units), int(math.floor(p.audit_share * len(units) + 1e-9)))
        out[lbl] = replace(p, audit_cutoff=float(units[count - 1]) if count else -1.0)
    if hasattr(priors, "task_keys"):  # a PriorSet (decisions/warm_start.py)
        return type(priors)(out, priors.task_keys)
    return out


def audit_of(task_ids, labels, priors: dict | None) -> np.ndarray | None:
    """Per task: audited, from the labels' LabelPrior audit cutoff (else share) and salt (None:
    no audit)."""
    shares = {lbl: getattr(p, "audit_share", 0.0) for lbl, p in (priors or {}).items()}
    if not any(shares.values()):
        return None
    salts = {getattr(p, "audit_salt", "") for p in (priors or {}).values()}
    salt = salts.pop() if len(salts) == 1 else ""
    cutoffs = {lbl: getattr(p, "audit_cutoff", None) for lbl, p in (priors or {}).items()}
    if any(v is None for lbl, v in cutoffs.items() if shares[lbl]):
        return audit_mask(task_ids, labels, shares, salt)
    limit = pd.Series(np.asarray(labels, dtype=object)).map(cutoffs).fillna(-1.0).to_numpy(float)
    return audit_unit(task_ids, salt) <= limit


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


def _weighted_rate(by_label: dict[str, dict]) -> float | None:
    """The run's flip rate: each audited label's rate weighted by its number of tasks."""
    sized = [(r["tasks"], r["flip_rate"]) for r in by_label.values() if r["flip_rate"] is not None]
    total = sum(t for t, _ in sized)
    return sum(t * rate for t, rate in sized) / total if total else None


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

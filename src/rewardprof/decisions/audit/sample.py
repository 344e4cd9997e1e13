"""The audit sample of adaptive `bayes`: tasks the prior never stops (they run until the keep
rules settle them, at K at the latest), so a run measures what stopping by the prior cost it.

Which tasks: a fixed share of each label (AUDIT_SHARE, at least AUDIT_MIN tasks: 0 by default,
the share is a budget, not a floor; at most the whole label), chosen by a hash of task_id:
deterministic, independent of the shard layout and of the order rollouts arrive in, and salted
per run (the run's generation key: another checkpoint audits other tasks). The share and salt
per label are fixed when the priors are fitted (that job sees every task) and recorded in
adaptive/prior.json; a shard then marks its own tasks by hash alone.

The flip-rate report on the sample: decisions/audit/report.py.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import replace

import numpy as np
import pandas as pd

AUDIT_SHARE = 0.03
AUDIT_MIN = 0


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
    if hasattr(priors, "task_keys"):  # a PriorSet (decisions/priors/warm_start.py)
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

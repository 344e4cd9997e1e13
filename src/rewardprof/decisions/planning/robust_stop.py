"""bayes' stopping test: with the label's threshold tau (decisions/planning/stop_budget.py,
recorded by the run), the point fit's P(flip) <= tau; without one, across the priors the first
round cannot rule out, as follows.

For a 0/1-reward task with c passes in n rollouts and a label prior with candidate grid priors
(decisions/priors/label.py), each candidate predicts the remaining K - n passes
(GridPrior.predictive) and so P(keep at K). The task stops only when, under every candidate,
the most likely decision at K is the same and its chance of being wrong is below delta: a
label whose first round is consistent with both "these tasks never pass" and "they rarely
pass" keeps sampling its 0/n tasks until the rollouts themselves tell the two apart. The
recorded decision is the most likely one under the point fit (the first candidate).
"""

from __future__ import annotations

import numpy as np

from rewardprof.decisions.planning.stop_tests import keep_at
from rewardprof.decisions.priors.label import LabelPrior


def _flips(ex, cands, n: int, c: int, k: int, group_size: int, label: str, post_fn):
    """(per candidate P(decision at k differs from the first candidate's most likely one),
    that decision is keep)."""
    remaining = k - n
    if remaining <= 0:
        return [0.0], bool(keep_at(ex, k, [c], group_size, label, post_fn)[0])
    keep_j = keep_at(ex, k, c + np.arange(remaining + 1), group_size, label, post_fn)
    p_keep = [float(cand.predictive(n, c, remaining)[keep_j].sum()) for cand in cands]
    keep = p_keep[0] >= 0.5
    return [(1.0 - p) if keep else p for p in p_keep], keep


def flip_range(
    ex, prior: LabelPrior, n: int, c: int, k: int, group_size: int, label: str = "", post_fn=None
) -> tuple[float, bool]:
    """(the largest P(decision at k differs from the point fit's most likely one) over the
    candidates, that decision is keep)."""
    flips, keep = _flips(ex, prior.candidates, n, c, k, group_size, label, post_fn)
    return max(flips), keep


def point_flip(
    ex, prior: LabelPrior, n: int, c: int, k: int, group_size: int, label: str = "", post_fn=None
) -> tuple[float, bool]:
    """(P(decision at k differs from the most likely one) under the point fit, that decision
    is keep)."""
    flips, keep = _flips(ex, (prior.point,), n, c, k, group_size, label, post_fn)
    return flips[0], keep


def robust_bayes_stop(
    ex, prior: LabelPrior, n, c, k: int, group_size: int, delta: float, label="", post_fn=None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(stop, keep, worst p_flip) per task (arrays n, c), once per distinct (n, c)."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    if not len(n):
        return np.zeros(0, bool), np.zeros(0, bool), np.zeros(0)
    keys, inverse = np.unique(np.stack([n, c], axis=1), axis=0, return_inverse=True)
    tau = (prior.stop_thresholds or {}).get(k)
    # with the label's threshold: the point fit's P(flip) (decisions/planning/stop_budget.py)
    test = flip_range if tau is None else point_flip
    rows = [test(ex, prior, int(a), int(b), k, group_size, label, post_fn) for a, b in keys]
    inverse = inverse.reshape(-1)
    p_flip = np.array([r[0] for r in rows])[inverse]
    keep = np.array([r[1] for r in rows], dtype=bool)[inverse]
    stop = (p_flip < delta) if tau is None else (p_flip <= tau)
    return stop | (n >= k), keep, p_flip

"""Warm start of adaptive `bayes` from an earlier run's profile of the same tasks.

Teams profile each checkpoint of a policy; a task's rewards under the previous checkpoint are
the best prior there is for its pass rate under the next one, as far as the policy did not
move. Model (tasks matched by task_id, the content hash; only labels with 0/1 rewards):

* the earlier pass rate p of a task of label L is drawn from a grid prior E_L fitted on the
  earlier profile's (num_rollouts, num_passed) of L's matched tasks (decisions/priors/grid.py,
  shrunk toward all matched tasks' pool), so after its earlier c0 passes in n0 rollouts
  p ~ E_L(. | n0, c0);
* the new pass rate moves on the logit scale, logit p' = logit p + N(0, tau^2) (`drift_matrix`:
  p = 0 and p = 1 stay, interior points spread over the interior of the grid);
* with probability `leak` a task changed beyond that (a new skill, a regression): p' is a fresh
  draw from the label's prior fitted on this run's first round (decisions/priors/label.py).

So a matched task's prior is (1 - leak) * E_L(. | n0, c0) moved by the drift + leak * the
label's prior: it depends on (label, n0, c0) alone, and every task of one such key shares it.
(tau, leak) is estimated on the first round (`fit_drift`: the marginal likelihood of every
matched task's first-round passes, maximised over a fixed grid): a checkpoint that changed a
lot gets a large tau or leak and its earlier profile counts for less. As the label priors, the
fit is not taken as known: the stopping test (decisions/planning/robust_stop.py) must hold under the
drifts the first round cannot rule out (log-likelihood within LIKELIHOOD_SLACK of the best),
represented by the corners of that set (and, at its largest leak, by the label priors the
first round cannot rule out). Unmatched tasks keep their label's prior.

Everything here is a deterministic function of the earlier profile's counts and this run's
first round: no randomness, grid search instead of an optimiser.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from rewardprof.decisions.priors.grid import (
    GRID,
    GridPrior,
    fit_grid,
    likelihood_matrix,
)
from rewardprof.decisions.priors.label import (
    LIKELIHOOD_SLACK,
    MIN_TASKS,
    SHRINK_TASKS,
    LabelPrior,
    best_edge_variants,
)
from rewardprof.decisions.priors.posterior import grouped_counts

TAU_GRID = tuple(round(0.1 * i, 1) for i in range(31))  # 0 .. 3 on the logit scale
LEAK_GRID = (0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0)
SOURCE = "warm"


class PriorSet(dict):
    """label or warm key -> LabelPrior, and `task_keys`: task_id -> the warm key of a matched
    task (decisions/planning/round_plan.py looks a task's prior up by `prior_keys_of`)."""

    def __init__(self, priors: dict, task_keys: dict[str, str] | None = None):
        super().__init__(priors)
        self.task_keys = dict(task_keys or {})


def prior_keys_of(task_ids, labels, priors) -> np.ndarray | None:
    """Per task, the key of its prior in `priors`: its warm key if matched, else its label
    (None: no task is warm-started)."""
    keys = getattr(priors, "task_keys", None)
    if not keys:
        return None
    labels = np.asarray(labels, dtype=object)
    return np.array(
        [keys.get(str(t), lbl) for t, lbl in zip(task_ids, labels, strict=True)], dtype=object
    )


def warm_key(label: str, n0: int, c0: int) -> str:
    """The prior key of a matched task (a space: never a label, labels have none)."""
    return f"{label} warm {c0}/{n0}"


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.vectorize(math.erf)(np.asarray(x, float) / math.sqrt(2.0)))


@lru_cache(maxsize=64)
def _drift_matrix(tau: float) -> np.ndarray:
    size = len(GRID)
    if tau <= 0:
        return np.eye(size)
    inner = GRID[1:-1]
    z = np.log(inner / (1.0 - inner))
    edges = np.concatenate([[-np.inf], (z[1:] + z[:-1]) / 2, [np.inf]])
    cdf = _normal_cdf((edges[None, :] - z[:, None]) / tau)
    out = np.zeros((size, size))
    out[0, 0] = out[-1, -1] = 1.0
    out[1:-1, 1:-1] = np.diff(cdf, axis=1)
    return out


def drift_matrix(tau: float) -> np.ndarray:
    """[g, h] = P(p' = GRID[h] | p = GRID[g]) for logit p' = logit p + N(0, tau^2), binned on
    the logit scale to the interior grid points; p = 0 and p = 1 stay where they are."""
    return _drift_matrix(round(float(tau), 6)).copy()


@dataclass(frozen=True)
class Drift:
    """The fitted (tau, leak), the corners of the set the first round cannot rule out (the
    fit first), and what they were fitted on."""

    tau: float
    leak: float
    candidates: tuple[tuple[float, float], ...]
    tasks: int
    log_likelihood: float

    def as_dict(self) -> dict:
        return {
            "tau": self.tau,
            "leak": self.leak,
            "candidates": [list(c) for c in self.candidates],
            "tasks": self.tasks,
            "log_likelihood": round(self.log_likelihood, 9),
        }


def earlier_grids(n0, c0, labels) -> dict[str, GridPrior]:
    """Per label, the grid prior of the earlier pass rates (its matched tasks' earlier counts,
    shrunk toward all of them with SHRINK_TASKS pseudo-tasks)."""
    n0 = np.asarray(n0, dtype=np.int64)
    c0 = np.asarray(c0, dtype=np.int64)
    labels = np.asarray(labels, dtype=object)
    pooled = fit_grid(n0, c0, None, 1.0)
    return {
        lbl: fit_grid(n0[labels == lbl], c0[labels == lbl], pooled.w, SHRINK_TASKS)
        for lbl in dict.fromkeys(labels.tolist())
    }


def warm_weights(
    earlier: GridPrior, n0: int, c0: int, label_prior: GridPrior, tau: float, leak: float
) -> np.ndarray:
    """The new pass rate's grid weights of a task with c0 passes in n0 earlier rollouts (the
    module doc's model)."""
    moved = earlier.posterior_weights(n0, c0) @ _drift_matrix(round(float(tau), 6))
    return (1.0 - leak) * moved + leak * label_prior.w


def bayes_warm_labels(priors: PriorSet, task_ids, labels) -> set[str]:
    """The labels some of whose tasks are warm-started under the bayes test (their audit
    sample must cover them, also where the label's own prior takes the exact test)."""
    keys = prior_keys_of(task_ids, labels, priors)
    if keys is None:
        return set()
    return {
        str(lbl)
        for lbl, key in zip(labels, keys, strict=True)
        if key != lbl and priors[key].stop_mode == "bayes"
    }


def fit_drift(
    keys: list[tuple[str, int, int]],
    earlier: dict[str, GridPrior],
    label_points: dict[str, GridPrior],
    key_of_task: np.ndarray,
    n,
    c,
) -> Drift:
    """(tau, leak) maximising the marginal likelihood of the matched tasks' first round:
    task i has earlier state keys[key_of_task[i]] = (label, n0, c0) and c[i] passes in n[i]
    first-round rollouts (n == 0: no evidence). Grid search over TAU_GRID x LEAK_GRID; ties go
    to the smaller tau, then the smaller leak (the grids' order)."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    key_of_task = np.asarray(key_of_task, dtype=np.int64)
    scored = n > 0
    states, counts = np.unique(
        np.stack([key_of_task[scored], n[scored], c[scored]], axis=1), axis=0, return_counts=True
    )
    tasks = int(counts.sum())
    if not tasks:
        return Drift(0.0, 1.0, ((0.0, 1.0),), 0, 0.0)
    lik = likelihood_matrix([(int(a), int(b)) for _, a, b in states])  # [state, g]
    post = np.array([earlier[lbl].posterior_weights(n0, c0) for lbl, n0, c0 in keys])  # [key, g]
    fresh = np.array([label_points[lbl].w for lbl, _, _ in keys])
    b = np.einsum("sg,sg->s", fresh[states[:, 0]], lik)
    leak = np.asarray(LEAK_GRID)
    table = np.empty((len(TAU_GRID), len(leak)))
    for i, tau in enumerate(TAU_GRID):
        moved = post @ _drift_matrix(tau)
        a = np.einsum("sg,sg->s", moved[states[:, 0]], lik)
        mix = (1.0 - leak)[:, None] * a[None, :] + leak[:, None] * b[None, :]
        with np.errstate(divide="ignore"):
            table[i] = np.log(mix) @ counts
    best = np.unravel_index(int(np.argmax(table)), table.shape)
    top = float(table[best])
    ok = table >= top - LIKELIHOOD_SLACK
    rows = np.flatnonzero(ok.any(axis=1))
    corners = [best]
    for i in (rows[0], best[0], rows[-1]):  # the smallest, fitted and largest tau allowed
        cols = np.flatnonzero(ok[i])
        corners += [(i, cols[0]), (i, cols[-1])]
    seen, cands = set(), []
    for i, j in corners:
        if (int(i), int(j)) not in seen:
            seen.add((int(i), int(j)))
            cands.append((TAU_GRID[int(i)], float(leak[int(j)])))
    return Drift(cands[0][0], cands[0][1], tuple(cands), tasks, top)


def _woken(w: np.ndarray, n: np.ndarray, c: np.ndarray) -> list[np.ndarray]:
    """The key's prior with the share of its p = 0 mass moved to a small p (and of its p = 1
    mass to a large p) that best fits its tasks' first round: a task never solved before that
    starts to pass rarely (a new skill) is not a shift on the logit scale, and from a few
    rollouts it looks like one that still never passes; where the first round shows such
    passes, an earlier 0/16 must not make a 0/4 task look settled. The most likely wake, not
    the largest the first round allows: within the label priors' slack of 2 (or as far as it
    fits as well as the key's prior), a 0/16 key of ~500 tasks at 0/4 with five passes among
    them fitted a wake under which 5-10 % of them flip, beyond delta alone, so the group never
    stopped where nothing had woken (docs/benchmarks.md)."""
    scored = n > 0
    if not scored.any():
        return []
    pairs, counts = grouped_counts(n[scored], c[scored])
    return best_edge_variants(w, likelihood_matrix(pairs), np.asarray(counts, float))


def warm_priors(
    task_ids,
    labels,
    n,
    c,
    label_priors: dict[str, LabelPrior],
    earlier: dict[str, tuple[int, int]],
    *,
    min_tasks: int = MIN_TASKS,
    streaky: frozenset[str] | set[str] = frozenset(),
) -> tuple[PriorSet, Drift | None]:
    """label_priors plus one LabelPrior per warm key, and the drift fitted on the first round.

    task_ids, labels, n, c: every task of the run with its first-round counts; `earlier`:
    task_id -> (n0, c0) of the earlier profile (tasks with n0 > 0). A task is warm-started when
    it is matched, its label's rewards are 0/1 and its label's first round shows no streaks
    (`streaky`, decisions/planning/streaks.py: no prior may stop those). The warm keys get the bayes
    test when the drift was fitted on at least `min_tasks` tasks (else the exact one: too few
    to say how far the policy moved)."""
    task_ids = np.asarray(task_ids, dtype=object)
    labels = np.asarray(labels, dtype=object)
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    pairs = zip(task_ids, labels, strict=True)
    matched = np.array(
        [
            str(t) in earlier and bool(label_priors[lbl].binary) and lbl not in streaky
            for t, lbl in pairs
        ],
        dtype=bool,
    )
    if not matched.any():
        return PriorSet(label_priors), None
    at = np.flatnonzero(matched)
    n0 = np.array([earlier[str(task_ids[i])][0] for i in at], dtype=np.int64)
    c0 = np.array([earlier[str(task_ids[i])][1] for i in at], dtype=np.int64)
    grids = earlier_grids(n0, c0, labels[at])
    state = list(zip(labels[at].tolist(), n0.tolist(), c0.tolist(), strict=True))
    keys = list(dict.fromkeys(state))
    index = {k: i for i, k in enumerate(keys)}
    points = {lbl: p.point for lbl, p in label_priors.items()}
    drift = fit_drift(keys, grids, points, [index[s] for s in state], n[at], c[at])
    out = dict(label_priors)
    most_leak = max(e for _, e in drift.candidates)
    for lbl, k0, p0 in keys:
        base = label_priors[lbl]
        # the drift's corners with the label's fit; at the largest leak also with the label
        # priors its first round cannot rule out (decisions/priors/label.py)
        mixes = [(t, e, base.point) for t, e in drift.candidates]
        if most_leak > 0:
            mixes += [(drift.tau, most_leak, other) for other in base.candidates[1:]]
        weights = [warm_weights(grids[lbl], k0, p0, fresh, t, e) for t, e, fresh in mixes]
        mine = np.array([index[s] == index[(lbl, k0, p0)] for s in state])
        weights += _woken(weights[0], n[at][mine], c[at][mine])
        cands = tuple(GridPrior(tuple(float(v) for v in w)) for w in weights)
        mode = "bayes" if drift.tasks >= min_tasks else "exact"
        out[warm_key(lbl, k0, p0)] = replace(base, source=SOURCE, stop_mode=mode, candidates=cands)
    task_keys = {str(task_ids[i]): warm_key(*s) for i, s in zip(at.tolist(), state, strict=True)}
    return PriorSet(out, task_keys), drift

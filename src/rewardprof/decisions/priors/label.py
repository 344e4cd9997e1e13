"""What adaptive `bayes` knows about a label after the first round: its grid priors, the priors
that round cannot rule out, whether its rewards are 0/1, and which stopping test it gets.

Fitted once on the first round (min_rollouts per task, every task of the run; see
stages/adaptive/prior.py) and recorded, so decisions are a function of the run:

* pooled: the grid prior (decisions/priors/grid.py) of every task of every label;
* a label's point fit: its own tasks, shrunk toward the pooled prior with SHRINK_TASKS
  pseudo-tasks (a Dirichlet hyperprior centred on the pool);
* candidates: the point fit, refits on bootstrap resamples of the label's tasks (how much the
  fit moves with which tasks happened to be drawn), and for each of them the priors that move
  mass from p = 0 to a small p (and from 1 to a large p) as far as the first round's
  likelihood allows (log-likelihood within LIKELIHOOD_SLACK of the fit). From min_rollouts
  rollouts "never passes" and "rarely passes" are nearly exchangeable, yet they predict
  different chances that a 0/n task passes later; the stopping test must hold under all of
  them (decisions/planning/robust_stop.py).
* stop_mode: "bayes" only for a label with 0/1 rewards (every first-round reward 0 or 1: a
  property of the label, not of one task's prefix), at least MIN_TASKS tasks and no streaks
  in its first round (decisions/planning/streaks.py: the priors assume independent rollouts); else
  "exact" (the exact test needs no prior). `source`: "label", or "pooled" for a label below
  MIN_TASKS (its profile columns use the pooled prior, flagged).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from rewardprof.decisions.priors.grid import (
    GRID,
    GridPrior,
    em_weights,
    fit_grid,
    likelihood_matrix,
    log_likelihood,
)
from rewardprof.decisions.priors.posterior import MixturePrior, grouped_counts

MIN_TASKS = 30
SHRINK_TASKS = 10.0
BOOTSTRAP_REPLICATES = 8
LIKELIHOOD_SLACK = 2.0
# where "rarely passes" mass is moved to (and 1 - these for "rarely fails")
_NEAR_ENDS = (0.01, 0.03, 0.06, 0.1, 0.2)


@dataclass(frozen=True)
class LabelPrior:
    tasks: int
    source: str  # label | pooled
    binary: bool
    stop_mode: str  # bayes | exact
    candidates: tuple[GridPrior, ...]
    # the profile's prior family, for the posterior keep rules (min_signal_probability, ...)
    mixture: MixturePrior | None = None
    # share of the label's tasks in the audit sample (decisions/audit/sample.py), set by the run
    audit_share: float = 0.0
    # K -> the stopping threshold tau (decisions/planning/stop_budget.py), set by the run; without
    # one the test is the per-task one (every candidate's P(flip) below delta)
    stop_thresholds: dict[int, float] | None = None
    # the audit hash's key (decisions/audit/sample.py), set by the run: its generation key
    audit_salt: str = ""
    # the largest salted hash of the label's audited tasks (-1: none), set by the run
    audit_cutoff: float | None = None

    @property
    def point(self) -> GridPrior:
        return self.candidates[0]

    def as_dict(self) -> dict:
        return {
            "tasks": self.tasks,
            "source": self.source,
            "binary": self.binary,
            "stop_mode": self.stop_mode,
            "candidates": [c.as_dict()["weights"] for c in self.candidates],
            "mixture": self.mixture.as_dict() if self.mixture else None,
            "audit_share": self.audit_share,
            "audit_salt": self.audit_salt,
            "audit_cutoff": self.audit_cutoff,
            "stop_thresholds": (
                None
                if self.stop_thresholds is None
                else {str(k): round(t, 12) for k, t in self.stop_thresholds.items()}
            ),
        }

    @classmethod
    def from_dict(cls, d: dict) -> LabelPrior:
        tasks = int(d["tasks"])
        cands = tuple(GridPrior.from_dict({"weights": w, "tasks": tasks}) for w in d["candidates"])
        mixture = MixturePrior.from_dict(d["mixture"]) if d.get("mixture") else None
        head = (tasks, str(d["source"]), bool(d["binary"]), str(d["stop_mode"]), cands, mixture)
        taus = d.get("stop_thresholds")
        taus = None if taus is None else {int(k): float(t) for k, t in taus.items()}
        share, salt = float(d.get("audit_share", 0.0)), str(d.get("audit_salt", ""))
        cutoff = d.get("audit_cutoff")
        return cls(*head, share, taus, salt, None if cutoff is None else float(cutoff))


def _near_index(p: float) -> int:
    return int(np.argmin(np.abs(GRID - p)))


def _moved(w: np.ndarray, src: int, dst: int, share: float) -> np.ndarray:
    out = w.copy()
    out[dst] += share * w[src]
    out[src] -= share * w[src]
    return out


def _edge_moves(w: np.ndarray) -> list[tuple[int, int]]:
    """(end, near-end point) for each point of _NEAR_ENDS, of an end that has mass in w."""
    ends = [(0, _near_index(p)) for p in _NEAR_ENDS]
    ends += [(len(GRID) - 1, _near_index(1.0 - p)) for p in _NEAR_ENDS]
    return [(src, dst) for src, dst in ends if w[src] > 1e-9]


def edge_variants(
    w: np.ndarray, lik: np.ndarray, counts: np.ndarray, floor: float
) -> list[np.ndarray]:
    """For each near-end point, w with the largest share of the end's mass moved there that
    keeps the log-likelihood >= floor (bisection on the share)."""
    out = []
    for src, dst in _edge_moves(w):
        lo, hi = 0.0, 1.0
        if log_likelihood(_moved(w, src, dst, hi), lik, counts) >= floor:
            lo = hi
        else:
            for _ in range(30):
                mid = (lo + hi) / 2
                if log_likelihood(_moved(w, src, dst, mid), lik, counts) >= floor:
                    lo = mid
                else:
                    hi = mid
        if lo > 1e-3:
            out.append(_moved(w, src, dst, lo))
    return out


def best_edge_variants(w: np.ndarray, lik: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    """For each near-end point, w with the share of the end's mass moved there that fits
    best (the most likely share, on a grid of 400 steps), where that share is above 0."""
    out = []
    shares = np.linspace(0.0, 1.0, 401)
    base = lik @ w
    for src, dst in _edge_moves(w):
        step = w[src] * (lik[:, dst] - lik[:, src])  # d(lik @ w) per share moved
        with np.errstate(divide="ignore"):
            fit = np.log(np.maximum(base[None, :] + shares[:, None] * step[None, :], 0.0)) @ counts
        share = float(shares[int(np.argmax(fit))])
        if share > 1e-3:
            out.append(_moved(w, src, dst, share))
    return out


def candidate_priors(
    n: np.ndarray, c: np.ndarray, pooled: GridPrior, seed: int, replicates: int
) -> tuple[GridPrior, ...]:
    """The point fit, bootstrap refits and their edge variants (see the module doc)."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    scored = n > 0
    n, c = n[scored], c[scored]
    point = fit_grid(n, c, pooled.w, SHRINK_TASKS)
    if not len(n):
        return (point,)
    pairs, weights = grouped_counts(n, c)
    lik, counts = likelihood_matrix(pairs), np.asarray(weights, float)
    floor = log_likelihood(point.w, lik, counts) - LIKELIHOOD_SLACK
    fits = [point.w]
    if replicates:
        # resampling tasks = a multinomial draw of how many tasks have each distinct (n, c)
        rng = np.random.default_rng(seed)
        resampled = rng.multinomial(int(counts.sum()), counts / counts.sum(), size=replicates)
        fits += list(em_weights(lik, resampled, pooled.w, SHRINK_TASKS))
    out = list(fits)
    for w in fits:
        out += edge_variants(w, lik, counts, floor)
    return tuple(GridPrior(tuple(float(v) for v in w), len(n)) for w in out)


def label_seed(label: str) -> int:
    """A seed fixed by the label's name (bootstrap resamples are part of the recorded fit)."""
    return zlib.crc32(label.encode())


def fit_label_priors(
    n: np.ndarray,
    c: np.ndarray,
    labels: np.ndarray,
    binary: dict[str, bool],
    *,
    min_tasks: int = MIN_TASKS,
    replicates: int = BOOTSTRAP_REPLICATES,
    mixtures: dict[str, MixturePrior] | None = None,
    streaky: frozenset[str] | set[str] = frozenset(),
) -> dict[str, LabelPrior]:
    """Per label: its LabelPrior from per-task first-round (n, c); `binary`: label -> every
    first-round reward of the label is 0 or 1; `mixtures`: label -> its profile-family prior
    (for posterior keep rules), recorded alongside; `streaky`: labels whose first round shows
    within-task correlation (decisions/planning/streaks.py), which get the exact test."""
    n = np.asarray(n, dtype=np.int64)
    c = np.asarray(c, dtype=np.int64)
    labels = np.asarray(labels, dtype=object)
    pooled = fit_grid(n, c, None, 1.0)  # one uniform pseudo-task: no zero weight by accident
    out = {}
    for label in dict.fromkeys(labels.tolist()):
        rows = labels == label
        tasks = int((n[rows] > 0).sum())
        is_binary = bool(binary.get(label, True))
        source = "pooled" if tasks < min_tasks else "label"
        fit_on = np.ones(len(n), bool) if source == "pooled" else rows
        cands = candidate_priors(n[fit_on], c[fit_on], pooled, label_seed(label), replicates)
        mode = "bayes" if is_binary and tasks >= min_tasks and label not in streaky else "exact"
        mixture = (mixtures or {}).get(label)
        out[label] = LabelPrior(tasks, source, is_binary, mode, cands, mixture)
    return out

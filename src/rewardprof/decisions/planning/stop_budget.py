"""bayes' stopping thresholds per label: the allowed flips spent where they save the most.

delta bounds the share of a label's tasks whose decision differs from fixed K's (1 - agreement),
not each task's own chance of flipping: requiring every stopped task to be 98 % sure left most
of the allowance unspent (0 realized flips where 2 % were allowed) and stopped almost nothing.
So each label gets a threshold tau, fixed when its prior is fitted and recorded with it: a
0/1-reward task with c passes in n rollouts (n at least bayes_from, not settled by the rules)
stops when the point fit's P(decision at K differs from the most likely one) is at most tau.
tau is the largest value for which, under every candidate prior the first round cannot rule
out (decisions/priors/label.py), the expected share of the label's tasks that stop on a flipped
decision is at most delta. That expectation is a forward pass over the states (n, c) a task
can reach in the planner's rounds (decisions/planning/round_plan.py): from the first round's
predictive distribution, each state either settles by the rules (no flip), stops by tau (a
flip with the candidate's probability), or grows by a round. A label whose tasks have several
priors (a warm start's keys: one per earlier count) shares its delta among them, one tau each:
one tau for all let the priors whose worst candidates are pessimistic (a few tasks per key)
block the stops of the large, sure ones (0/16 and 16/16 earlier), and the allowance is spent
where an expected flip saves the most rollouts.
A task's plan stays a function of its own results and the recorded prior (no barrier), and the
expected rollouts per task come out of the same pass (`expected_share`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from rewardprof.decisions.planning.stop_tests import keep_at
from rewardprof.decisions.priors.grid import predictive_many


@dataclass(frozen=True)
class Rounds:
    """The planner's rounds: `first` rollouts, then `round_size` more, up to `k`; the prior's
    test from `bayes_from` rollouts on."""

    k: int
    first: int
    round_size: int
    bayes_from: int

    def sizes(self) -> list[int]:
        out, n = [], min(self.first, self.k)
        while True:
            out.append(n)
            if n >= self.k:
                return out
            n = min(n + self.round_size, self.k)


@dataclass(frozen=True)
class _State:
    n: int
    c: int
    settled: bool  # by the rules, whatever is still to come
    p_flip: float  # the point fit's chance that the most likely decision at K is wrong
    flip: np.ndarray  # per candidate: the chance that decision is wrong
    grow: np.ndarray  # per candidate and j: P(j passes in the next round)


def _states(ex, prior, rounds: Rounds, group_size: int, label: str, post_fn) -> list[_State]:
    weights = np.array([cand.w for cand in prior])
    out = []
    sizes = rounds.sizes()
    for n, nxt in zip(sizes, [*sizes[1:], sizes[-1]], strict=True):
        rest = rounds.k - n
        for c in range(n + 1):
            keep_j = keep_at(ex, rounds.k, c + np.arange(rest + 1), group_size, label, post_fn)
            settled = bool(keep_j.all() or not keep_j.any())
            # the export drops a keep with fewer than min_rollouts scored rollouts
            settled &= not (keep_j.all() and n < ex.min_rollouts and rest > 0)
            p_keep = predictive_many(weights, n, c, rest)[:, keep_j].sum(axis=1)
            keep = p_keep[0] >= 0.5
            flip = (1.0 - p_keep) if keep else p_keep
            grow = predictive_many(weights, n, c, nxt - n)
            out.append(_State(n, c, settled or rest == 0, float(flip[0]), flip, grow))
    return out


def _forward(states: list[_State], prior, rounds: Rounds, tau: float):
    """Per candidate: (expected share of tasks stopped on a flipped decision, expected rollouts
    per task) when tasks stop at p_flip <= tau."""
    by = {(s.n, s.c): s for s in states}
    sizes = rounds.sizes()
    start = predictive_many(np.array([cand.w for cand in prior]), 0, 0, sizes[0])
    alive = {c: start[:, c] for c in range(sizes[0] + 1)}
    flips = np.zeros(len(prior))
    spent = np.full(len(prior), float(sizes[0]))
    for n, nxt in zip(sizes, [*sizes[1:], None], strict=True):
        grown: dict[int, np.ndarray] = {}
        for c, mass in alive.items():
            s = by[(n, c)]
            if s.settled:
                continue
            if n >= rounds.bayes_from and s.p_flip <= tau:
                flips += mass * s.flip
                continue
            if nxt is None:
                continue
            spent += mass * (nxt - n)
            for j in range(s.grow.shape[1]):
                grown[c + j] = grown.get(c + j, 0.0) + mass * s.grow[:, j]
        alive = grown
    return flips, spent / rounds.k


def stop_threshold(
    ex, candidates, rounds: Rounds, group_size: int, delta: float, label: str = "", post_fn=None
) -> float:
    """The tau of one prior's tasks alone (see the module doc); -1.0 when no stop fits."""
    parts = [(1.0, candidates, post_fn)]
    return pooled_thresholds(ex, parts, rounds, group_size, delta, label)[0]


def _path(share: float, states, cands, rounds: Rounds, delta: float):
    """One prior's options in the order its stops grow: (tau, its share-weighted expected
    flips under its worst candidate, its share-weighted expected rollouts under the point fit),
    from no stop (-1) up to the last tau whose flips alone fit in delta."""
    options = sorted(
        {s.p_flip for s in states if not s.settled and s.n >= rounds.bayes_from and s.p_flip < 0.5}
    )
    flips, spent = _forward(states, cands, rounds, -1.0)
    out = [(-1.0, share * float(flips.max()), share * float(spent[0]))]
    for tau in options:  # more stops spend more of the allowance: the first miss ends it
        flips, spent = _forward(states, cands, rounds, tau)
        if share * float(flips.max()) > delta:
            break
        out.append((tau, share * float(flips.max()), share * float(spent[0])))
    return out


def _cheapest(path, price: float) -> int:
    """The option of `path` with the fewest rollouts plus `price` per expected flip."""
    return min(range(len(path)), key=lambda i: (path[i][2] + price * path[i][1], -i))


def pooled_thresholds(ex, parts, rounds: Rounds, group_size: int, delta: float, label: str = ""):
    """One tau per prior of a label whose tasks have several (a warm start's keys): `parts` is
    (share of the label's tasks, candidates, post_fn) per prior. The label's allowance delta is
    shared: the expected flips, each prior's worst candidate weighted by its share, sum to at
    most delta, spent where a flip buys the most rollouts (the smallest price per expected flip
    at which the priors' cheapest options fit, then what is left given out greedily). A single
    prior gets the largest tau whose flips fit."""
    paths = [
        _path(share, _states(ex, cands, rounds, group_size, label, fn), cands, rounds, delta)
        for share, cands, fn in parts
    ]

    def flips(choice: list[int]) -> float:
        return sum(path[i][1] for path, i in zip(paths, choice, strict=True))

    lo, hi = 0.0, 1e12  # price per expected flip, in rollouts per task (shares of K)
    if flips([_cheapest(p, lo) for p in paths]) > delta:
        for _ in range(100):
            mid = math.sqrt(lo * hi) if lo > 0 else hi / 1e12
            if flips([_cheapest(p, mid) for p in paths]) > delta:
                lo = mid
            else:
                hi = mid
        choice = [_cheapest(p, hi) for p in paths]
    else:
        choice = [_cheapest(p, lo) for p in paths]
    improved = True
    while improved:  # the allowance left: the next option that still fits, most saved first
        improved = False
        left = delta - flips(choice)
        steps = [
            (path[i + 1][2] - path[i][2], j)
            for j, (path, i) in enumerate(zip(paths, choice, strict=True))
            if i + 1 < len(path) and path[i + 1][1] - path[i][1] <= left
        ]
        if steps:
            _, j = min(steps)
            choice[j] += 1
            improved = True
    return [path[i][0] for path, i in zip(paths, choice, strict=True)]


def expected_share(
    ex, candidates, rounds: Rounds, group_size: int, tau: float, label: str = "", post_fn=None
) -> float:
    """Expected share of K's rollouts a task uses under the point fit, stopping at tau."""
    states = _states(ex, candidates, rounds, group_size, label, post_fn)
    _, share = _forward(states, candidates, rounds, tau)
    return float(share[0])


def with_stop_thresholds(priors: dict, keys, k, labels, settings, ex, post_fns=None) -> dict:
    """The priors (key -> LabelPrior) with each bayes one's tau per K, each label's delta
    shared among the priors of its tasks with that K (`keys`, `k`, `labels`: per task its
    prior's key, num_repeats and label; `settings`: the planner's AdaptiveSettings)."""
    keys, labels = np.asarray(keys, dtype=object), np.asarray(labels, dtype=object)
    k = np.asarray(k, dtype=np.int64)
    taus: dict[object, dict[int, float]] = {}
    for label in dict.fromkeys(labels.tolist()):
        for kk in sorted(set(k[labels == label].tolist())):
            rows = (labels == label) & (k == kk)
            parts, stopping = [], []
            for key in dict.fromkeys(keys[rows].tolist()):
                prior = priors[key]
                if getattr(prior, "stop_mode", "exact") != "bayes":
                    continue  # the exact test: no flips, its tasks still count in the share
                share = float((keys[rows] == key).mean())
                parts.append((share, prior.candidates, (post_fns or {}).get(key)))
                stopping.append(key)
            if not parts:
                continue
            rounds = Rounds(int(kk), settings.first, settings.round_size, settings.bayes_from)
            found = pooled_thresholds(
                ex, parts, rounds, settings.group_size, settings.delta, str(label)
            )
            for key, tau in zip(stopping, found, strict=True):
                taus.setdefault(key, {})[int(kk)] = tau
    return {
        key: replace(p, stop_thresholds=taus[key]) if key in taus else p
        for key, p in priors.items()
    }

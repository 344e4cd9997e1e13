"""Within-task correlation in a label's first round: whether its tasks' rollouts come in streaks.

bayes' priors assume a task's rollouts are independent given its pass rate (rollouts sampled
with their own seeds are). Streaks, a rollout more likely to repeat the one before it, look
to the fit like mass at p = 0 and p = 1, and the prior then stops 0/n and n/n tasks whose
streak would have broken: with Markov-correlated rollouts (lag-1 correlation 0.7) agreement
with fixed K fell to 91-96 % on 1,000-task labels, where delta promises 98 %.

The first round can tell without a model of the correlation. In exact's rounds a task gets
another round (of round_size >= 2 rollouts, sampled together) only while all its rollouts so
far agree (on a value a); given the task's pass rate, that round's rollouts are exchangeable,
so among the tasks whose last round is split (its first and last rollout differ), the first
equals a exactly as often as the last does: a fair coin per task, whatever the pass rates.
Streaks make the rollout next to the earlier ones repeat a more often. A one-sided exact
binomial test of those tasks at STREAK_ALPHA; a label that fails it gets the exact test (no
prior stops it, so nothing flips). Only split tasks inform it, so it sees strong correlation
on large labels and little on small ones (docs/benchmarks.md); the audit sample is the check
that remains for the rest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

STREAK_ALPHA = 0.01


@dataclass(frozen=True)
class StreakTest:
    """A label's first round: `split` tasks whose last round was split, `near` of them with
    that round's first rollout repeating the earlier ones, and the one-sided p-value."""

    split: int
    near: int
    p_value: float

    @property
    def streaky(self) -> bool:
        return self.p_value < STREAK_ALPHA

    def as_dict(self) -> dict:
        return {
            "split_tasks": self.split,
            "repeating_first": self.near,
            "p_value": round(self.p_value, 12),
            "streaky": self.streaky,
        }


def upper_tail(near: int, split: int) -> float:
    """P(Binomial(split, 1/2) >= near), exactly."""
    if split == 0:
        return 1.0
    return sum(math.comb(split, i) for i in range(near, split + 1)) / 2**split


def round_ends(first: int, round_size: int, last: int) -> list[int]:
    """How many rollouts a task has after each of exact's rounds: `first`, then `round_size`
    more at a time, at most `last` (the first round's: adaptive.min_rollouts)."""
    out = [min(first, last)]
    while out[-1] < last:
        out.append(min(out[-1] + round_size, last))
    return out


def streak_tests(
    labels, task_index, rollout_index, passed, ends: list[int]
) -> dict[str, StreakTest]:
    """Per label of `labels` (one per scored rollout, with its task_index, rollout_index and
    pass/fail), the test of the module doc; `ends`: round_ends of the first round. A task counts
    only with rollouts 0..n-1 all scored, n the end of a round after the first, of 2 or more."""
    frame = pd.DataFrame(
        {
            "label": np.asarray(labels, dtype=object),
            "task": np.asarray(task_index, dtype=np.int64),
            "r": np.asarray(rollout_index, dtype=np.int64),
            "x": np.asarray(passed, dtype=bool),
        }
    ).sort_values(["task", "r"])
    counts: dict[str, list[int]] = {}
    for (label, _), g in frame.groupby(["label", "task"], sort=False):
        x, n = g["x"].to_numpy(), len(g)
        tally = counts.setdefault(str(label), [0, 0])
        at = ends.index(n) if n in ends else 0
        if not at or n - ends[at - 1] < 2 or not np.array_equal(g["r"], np.arange(n)):
            continue
        head, last = x[: ends[at - 1]], x[ends[at - 1] :]
        if (head != head[0]).any() or last[0] == last[-1]:
            continue  # a mixed prefix (not exact's rounds) or a round that is not split
        tally[0] += 1
        tally[1] += int(last[0] == head[0])
    return {lbl: StreakTest(s, k, upper_tail(k, s)) for lbl, (s, k) in counts.items()}

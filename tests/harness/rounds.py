"""The round-synchronous adaptive loop, as the rollout stage ran it before rounds were planned
task by task: plan every task, sample everything the plan is missing, wait for all of it,
plan again. The reference the no-barrier planner is tested against (unit and fault tests)."""

from __future__ import annotations

import numpy as np

from rewardprof.decisions.adaptive_plan import AdaptiveSettings, Plan, Records, plan


def round_synchronous(
    settings: AdaptiveSettings,
    ex,
    num_repeats: np.ndarray,
    labels: np.ndarray,
    rewards: np.ndarray,
    priors: dict | None = None,
    pass_threshold: float = 1.0,
    audit: np.ndarray | None = None,
) -> tuple[set[tuple[int, int]], Plan]:
    """(the (task position, rollout index) pairs sampled, the final plan); `rewards[pos, r]`:
    rollout r of task pos's reward (NaN: it failed)."""
    pos, idx = np.zeros(0, np.int64), np.zeros(0, np.int64)
    while True:
        records = Records(pos, idx, rewards[pos, idx])
        p = plan(settings, ex, num_repeats, labels, records, priors, pass_threshold, audit)
        new_pos, new_idx = p.missing(records)
        if not len(new_pos):
            return set(zip(pos.tolist(), idx.tolist(), strict=True)), p
        pos, idx = np.concatenate([pos, new_pos]), np.concatenate([idx, new_idx])

"""A run's tables made from an outcome matrix, for putting simulated runs through the profile and
export stages' own functions (the adaptive benchmarks and the exact-export property test):
`outcomes[t, r]` is the reward rollout r of task t gets whenever it is sampled (NaN: it fails)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def tasks_table(k: np.ndarray, labels) -> pd.DataFrame:
    """The tasks table of `len(k)` math tasks, task t asking for k[t] rollouts under labels[t]."""
    return pd.DataFrame(
        {
            "task_index": np.arange(len(k)),
            "task_id": [f"task-{i}" for i in range(len(k))],
            "label": labels,
            "environment": "math",
            "num_repeats": k,
            "row": ["{}"] * len(k),
        }
    )


def rollouts_table(outcomes: np.ndarray, pos: np.ndarray, idx: np.ndarray) -> pd.DataFrame:
    """The rollouts (pos[i], idx[i]) sampled, each with its outcome; a NaN one an engine error."""
    reward = outcomes[pos, idx]
    failed = np.isnan(reward)
    return pd.DataFrame(
        {
            "task_index": pos,
            "rollout_index": idx,
            "status": np.where(failed, "engine_error", "ok"),
            "reward": pd.array(np.where(failed, np.nan, reward), dtype="Float64"),
            "finish_reason": "stop",
            "completion_tokens": 10,
        }
    )


def plans_table(plan) -> pd.DataFrame:
    """The plan metadata merge writes beside the rollouts, from a planner's final plan."""
    return pd.DataFrame(
        {
            "task_index": np.arange(len(plan.planned)),
            "planned": plan.planned,
            "stopped_early": plan.stopped_early,
            "keep": plan.keep,
        }
    )

"""The adaptive plan's file format: what an adaptive shard job planned per task, recorded in its
output's Parquet key-value metadata (PLAN_KEY), so merge, profile, check and status know how
many rollouts each task stopped at without the config or the planner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

PLAN_KEY = b"rewardprof.adaptive_plan"


def plan_metadata(
    task_index: np.ndarray, planned: np.ndarray, stopped_early: np.ndarray, keep: np.ndarray
) -> dict[bytes, bytes]:
    """The plan as Parquet key-value metadata of the shard output (one entry per task)."""
    body = {
        "task_index": np.asarray(task_index).astype(int).tolist(),
        "planned": np.asarray(planned).astype(int).tolist(),
        "stopped_early": np.asarray(stopped_early).astype(bool).tolist(),
        "keep": np.asarray(keep).astype(bool).tolist(),
    }
    return {PLAN_KEY: json.dumps(body, separators=(",", ":")).encode()}


def planned_per_task(
    plans: pd.DataFrame, task_index: np.ndarray, num_repeats: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(planned rollouts, stopped_early, keep) of each task of `task_index`, in its order: a
    task the plans do not name was planned its num_repeats, not stopped early, not kept."""
    plan = plans.set_index("task_index").reindex(task_index)
    planned = plan["planned"].to_numpy(dtype=float)
    planned = np.where(np.isnan(planned), num_repeats, planned).astype(np.int64)
    stopped_early = plan["stopped_early"].fillna(False).to_numpy(dtype=bool)
    return planned, stopped_early, plan["keep"].fillna(False).to_numpy(dtype=bool)


def read_plans(paths: list[Path]) -> pd.DataFrame | None:
    """task_index, planned, stopped_early, keep from the shard outputs (or the files of a
    merged dataset); None when they were made without adaptive sampling."""
    parts = []
    for path in paths:
        meta = pq.read_schema(path).metadata or {}
        if PLAN_KEY in meta:
            parts.append(pd.DataFrame(json.loads(meta[PLAN_KEY])))
    if not parts:
        return None
    return pd.concat(parts, ignore_index=True).sort_values("task_index", ignore_index=True)

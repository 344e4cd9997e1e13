"""The profile's episode columns: per task, what its episodes did (environments that act).

Read only for the labels whose environment acts, from each record's `extras.episode`
(stages/rollout/episodes.py): mean and max turns, mean tool calls and tool errors, and how
many episodes ended for each stop reason. Tasks of other labels have none (NaN / 0).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from rewardprof.core.config import Config
from rewardprof.environments import get_environment_class

STOP_REASONS = ("no_call", "max_steps", "token_budget", "length")


def acting_labels(cfg: Config) -> list[str]:
    """The labels whose environment runs episodes."""
    return [
        e.label for e in cfg.entries if getattr(get_environment_class(e.environment), "acts", False)
    ]


def episode_columns(cfg: Config, tasks: pd.DataFrame, rollouts: Path) -> dict[str, np.ndarray]:
    """Columns to add to the task profile (empty when no label acts)."""
    labels = acting_labels(cfg)
    if not labels:
        return {}
    table = pq.read_table(
        rollouts, columns=["task_index", "extras"], filters=[("label", "in", labels)]
    )
    index, steps, calls, errors, stops = [], [], [], [], []
    for task_index, extras in zip(
        table["task_index"].to_pylist(), table["extras"].to_pylist(), strict=True
    ):
        episode = json.loads(extras).get("episode") if extras else None
        if not isinstance(episode, dict):
            continue  # a failed episode (tool_error, ...) has no figures
        index.append(task_index)
        steps.append(episode["steps"])
        calls.append(episode["tool_calls"])
        errors.append(episode["tool_errors"])
        stops.append(episode["stop_reason"])
    frame = pd.DataFrame(
        {"task_index": index, "steps": steps, "tool_calls": calls, "tool_errors": errors}
    )
    by_task = frame.groupby("task_index")
    order = tasks["task_index"].to_numpy()
    cols: dict[str, np.ndarray] = {
        "num_episodes": by_task.size().reindex(order, fill_value=0).to_numpy(),
        "mean/steps": by_task["steps"].mean().reindex(order).to_numpy(dtype=float),
        "max/steps": by_task["steps"].max().reindex(order).to_numpy(dtype=float),
        "mean/tool_calls": by_task["tool_calls"].mean().reindex(order).to_numpy(dtype=float),
        "mean/tool_errors": by_task["tool_errors"].mean().reindex(order).to_numpy(dtype=float),
    }
    frame["stop"] = stops
    for reason in STOP_REASONS:
        hits = frame[frame["stop"] == reason].groupby("task_index").size()
        cols[f"num_stop/{reason}"] = hits.reindex(order, fill_value=0).to_numpy()
    return cols

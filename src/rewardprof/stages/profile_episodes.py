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
from rewardprof.environments.episode import STOP_REASONS


def acting_labels(cfg: Config) -> list[str]:
    """The labels whose environment runs episodes."""
    return [
        e.label for e in cfg.entries if getattr(get_environment_class(e.environment), "acts", False)
    ]


def read_episodes(cfg: Config, rollouts: Path) -> pd.DataFrame | None:
    """One row per scored episode of the labels that act (task_index, label, steps,
    tool_calls, tool_errors, stop), or None when no label acts."""
    labels = acting_labels(cfg)
    if not labels:
        return None
    table = pq.read_table(
        rollouts, columns=["task_index", "label", "extras"], filters=[("label", "in", labels)]
    )
    rows = []
    for task_index, label, extras in zip(
        table["task_index"].to_pylist(),
        table["label"].to_pylist(),
        table["extras"].to_pylist(),
        strict=True,
    ):
        episode = json.loads(extras).get("episode") if extras else None
        if not isinstance(episode, dict):
            continue  # a failed episode (tool_error, ...) has no figures
        rows.append(
            (
                task_index,
                label,
                episode["steps"],
                episode["tool_calls"],
                episode["tool_errors"],
                episode["stop_reason"],
            )
        )
    columns = ["task_index", "label", "steps", "tool_calls", "tool_errors", "stop"]
    return pd.DataFrame(rows, columns=columns)


def episode_columns(episodes: pd.DataFrame | None, tasks: pd.DataFrame) -> dict[str, np.ndarray]:
    """Columns to add to the task profile (empty when no label acts)."""
    if episodes is None:
        return {}
    by_task = episodes.groupby("task_index")
    order = tasks["task_index"].to_numpy()
    cols: dict[str, np.ndarray] = {
        "num_episodes": by_task.size().reindex(order, fill_value=0).to_numpy(),
        "mean/steps": by_task["steps"].mean().reindex(order).to_numpy(dtype=float),
        "max/steps": by_task["steps"].max().reindex(order).to_numpy(dtype=float),
        "mean/tool_calls": by_task["tool_calls"].mean().reindex(order).to_numpy(dtype=float),
        "mean/tool_errors": by_task["tool_errors"].mean().reindex(order).to_numpy(dtype=float),
    }
    for reason in STOP_REASONS:
        hits = episodes[episodes["stop"] == reason].groupby("task_index").size()
        cols[f"num_stop/{reason}"] = hits.reindex(order, fill_value=0).to_numpy()
    return cols


def steps_histograms(episodes: pd.DataFrame | None) -> dict[str, dict[str, int]]:
    """Per label that acts, how many scored episodes took each number of model turns
    ({"1": 4, "3": 2}; JSON keys are strings), for the summary and the report's plot."""
    if episodes is None:
        return {}
    counts = episodes.groupby(["label", "steps"]).size()
    out: dict[str, dict[str, int]] = {}
    for (label, steps), n in counts.items():
        out.setdefault(str(label), {})[str(int(steps))] = int(n)
    return out

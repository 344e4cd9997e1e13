"""A profile built in process from rewards per task, and the export's reason per task: what the
keep-rule tests read (no run directory)."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa

from rewardprof.decisions.keep_rules import REASONS
from rewardprof.stages.export import drop_reasons
from rewardprof.stages.profile import task_profile


def profile_of(cfg, per_task: list[tuple[str, list[float | None]]], num_repeats: int):
    """task_profile of (label, rewards) per task; None is a failed rollout (engine_error)."""
    tasks = pd.DataFrame(
        {
            "task_index": range(len(per_task)),
            "task_id": [f"t{i}" for i in range(len(per_task))],
            "label": [lbl for lbl, _ in per_task],
            "environment": "math",
            "num_repeats": num_repeats,
            "row": [json.dumps({"q": i}) for i in range(len(per_task))],
        }
    )
    rows = [
        (t, r, "ok" if v is not None else "engine_error", v, "stop", 5)
        for t, (_, rewards) in enumerate(per_task)
        for r, v in enumerate(rewards)
    ]
    cols = ["task_index", "rollout_index", "status", "reward", "finish_reason", "completion_tokens"]
    return task_profile(cfg, tasks, pd.DataFrame(rows, columns=cols))


def export_reasons(cfg, prof: pd.DataFrame) -> list[str]:
    """The export's drop reason per task of a profile ("kept" for a kept one)."""
    table = pa.Table.from_pandas(prof.drop(columns="sample"), preserve_index=False)
    return [REASONS[i] if i >= 0 else "kept" for i in drop_reasons(cfg, table)]

"""adaptive savings: what adaptive sampling saved, from the plans in the merged rollouts
(store/plans.py) and the audit report where the run has one (bayes): rollouts sent against
fixed K, tasks stopped early per label, the audit's agreement with fixed K. Written to
RunLayout.adaptive_savings; the profile puts it in summary.json's `adaptive` section (which the
report's tables show) and says it in words at the end of the run (run_summary.savings_lines)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict

import pandas as pd
import pyarrow.parquet as pq

from rewardprof.core.atomic import write_json_atomic
from rewardprof.stages import SavingsPaths
from rewardprof.store.plans import planned_per_task, read_plans

if TYPE_CHECKING:
    from rewardprof.core.config import Config


class LabelSavings(TypedDict):
    rollouts_sent: int
    rollouts_at_fixed_k: int
    tasks: int
    tasks_stopped_early: int


class SavingsReport(TypedDict):
    rollouts_sent: int
    rollouts_at_fixed_k: int
    tasks_stopped_early: int
    labels: dict[str, LabelSavings]
    audit: NotRequired[dict[str, Any]]


def run(cfg: Config | None, paths: SavingsPaths) -> SavingsReport | None:
    """What the plans of the merged rollouts (paths.rollouts) of the tasks (paths.tasks) saved,
    with the audit's agreement (paths.audit, bayes), written to paths.out (null when the
    rollouts hold no plan: not adaptive) and returned. Needs no config."""
    tasks = pq.read_table(paths.tasks, columns=["task_index", "label", "num_repeats"]).to_pandas()
    merged = paths.rollouts
    plans = read_plans(sorted(merged.rglob("*.parquet")) if merged.is_dir() else [merged])
    per_task = pd.DataFrame(index=range(len(tasks)))
    if plans is not None:  # the profile's expected_num_rollouts and stopped_early columns
        repeats = tasks["num_repeats"].to_numpy()
        planned, stopped_early, _ = planned_per_task(plans, tasks["task_index"].to_numpy(), repeats)
        per_task["expected_num_rollouts"] = planned
        per_task["stopped_early"] = stopped_early
    labels = [str(lbl) for lbl in pd.unique(tasks["label"])]  # the entries' order
    saved = savings(tasks, per_task, labels, paths.audit)
    write_json_atomic(paths.out, saved)
    return saved


def savings(
    tasks: pd.DataFrame, prof: pd.DataFrame, labels: list[str], audit_path: Path | None
) -> SavingsReport | None:
    """Per label and overall: rollouts sent (the plan's), at fixed K (num_repeats), tasks
    stopped early (`prof`: expected_num_rollouts, stopped_early per task, as the profile's);
    None when the run was not adaptive (no plan in the rollouts)."""
    if "stopped_early" not in prof:
        return None
    by_task = pd.DataFrame(
        {
            "label": tasks["label"].to_numpy(),
            "fixed_k": tasks["num_repeats"].to_numpy(),
            "sent": prof["expected_num_rollouts"].to_numpy(),
            "stopped_early": prof["stopped_early"].to_numpy(dtype=bool),
        }
    )
    parts = by_task.groupby("label", sort=False).sum(numeric_only=True)
    rows = {
        label: {
            "rollouts_sent": int(parts.loc[label, "sent"]),
            "rollouts_at_fixed_k": int(parts.loc[label, "fixed_k"]),
            "tasks": int((by_task["label"] == label).sum()),
            "tasks_stopped_early": int(parts.loc[label, "stopped_early"]),
        }
        for label in labels
        if label in parts.index
    }
    out: SavingsReport = {
        "rollouts_sent": int(by_task["sent"].sum()),
        "rollouts_at_fixed_k": int(by_task["fixed_k"].sum()),
        "tasks_stopped_early": int(by_task["stopped_early"].sum()),
        "labels": rows,
    }
    audit = _audit(audit_path) if audit_path is not None else None
    if audit is not None:
        out["audit"] = audit
    return out


def _audit(path: Path) -> dict[str, Any] | None:
    """The audit's overall agreement (audited tasks stopped early whose decision at K is the
    same), if the run wrote one."""
    try:
        report = json.loads(path.read_text())
        overall = report["overall"]
        stopped, flipped = int(overall["would_stop_early"]), int(overall["flipped"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {
        "audited_tasks": int(overall.get("audited_tasks") or 0),
        "extra_rollouts": int(overall.get("extra_rollouts") or 0),
        "stopped_early": stopped,
        "agreed": stopped - flipped,
        "flip_rate_interval": overall.get("flip_rate_interval"),
        "settings": report.get("settings", {}),
        "labels_audited": {
            lbl: int(r.get("audited_tasks") or 0) for lbl, r in report.get("labels", {}).items()
        },
        "too_few_to_say": {
            lbl: r for lbl, r in report.get("labels", {}).items() if r.get("too_few_to_say")
        },
    }

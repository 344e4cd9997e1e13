"""The batch of a profiled run: its export's kept tasks, and a few dropped ones as controls.

Kept tasks are those in `export/combined.jsonl`; controls are tasks the export dropped for having
no signal (`all_fail`, `all_pass` in `export/report.json`), the first `controls` in task order.
Each task's prompt is the messages the rollouts were sampled on (`materialize/tasks.parquet`),
and its group is its ok rollouts in `rollouts.parquet` (completion text and reward). A failed
rollout has no reward: it is left out of its group, never counted as reward 0. Episodes (tasks
of an environment that acts) are multi-turn trajectories, not one completion: they are left out
and counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from rewardprof.core.errors import RewardprofError
from rewardprof.core.kinds import OK
from rewardprof.environments import get_environment_class
from rewardprof.environments.acting import ActingEnvironment
from rewardprof.store.layout import RunLayout


class TrainError(RewardprofError, RuntimeError):
    """A batch cannot be built or trained on (`rewardprof grpo-step` exits 2)."""

    exit_code = 2


NO_SIGNAL_REASONS = ("all_fail", "all_pass")
ROLLOUT_COLUMNS = ["task_index", "rollout_index", "task_id", "status", "reward", "completion"]


def _require(path: Path, what: str) -> None:
    if not path.exists():
        raise TrainError(f"{path}: {what} missing; profile the run first (make run)")


def _kept_indices(layout: RunLayout, profile_key: str) -> list[int]:
    kept = []
    for n, line in enumerate(layout.export_combined.read_text().splitlines(), 1):
        if line.strip():
            try:
                kept.append(int(json.loads(line)[profile_key]["task_index"]))
            except (ValueError, KeyError, TypeError) as exc:
                raise TrainError(
                    f"{layout.export_combined}:{n}: no {profile_key}.task_index; "
                    "re-run the export (snakemake ... export)"
                ) from exc
    return kept


def _control_indices(report: dict, controls: int) -> list[int]:
    dropped = report.get("dropped_tasks", {})
    no_signal = sorted(i for r in NO_SIGNAL_REASONS for i in dropped.get(r, []))
    return no_signal[:controls]


def _acts(environment: str) -> bool:
    try:
        return issubclass(get_environment_class(environment), ActingEnvironment)
    except KeyError:  # an environment no longer installed: its rows are single-turn text anyway
        return False


def run_batch(run_dir: Path, controls: int) -> tuple[list[dict], dict]:
    """(the batch rows, a note of what was taken) for RUN_DIR."""
    layout = RunLayout(run_dir)
    for path, what in (
        (layout.export_combined, "the export"),
        (layout.export_report, "the export report"),
        (layout.tasks, "the tasks table"),
        (layout.rollouts, "the merged rollouts"),
    ):
        _require(path, what)
    report = json.loads(layout.export_report.read_text())
    profile_key = report.get("rules", {}).get("profile_key", "reward_profile")
    kept = _kept_indices(layout, profile_key)
    chosen = {i: True for i in kept} | {i: False for i in _control_indices(report, controls)}
    tasks = pq.read_table(
        layout.tasks, columns=["task_index", "task_id", "environment", "messages"]
    ).to_pylist()
    tasks = {t["task_index"]: t for t in tasks if t["task_index"] in chosen}
    acting = sorted(i for i, t in tasks.items() if _acts(t["environment"]))
    wanted = [i for i in sorted(chosen) if i in tasks and i not in acting]
    table = ds.dataset(layout.rollouts, format="parquet").to_table(
        columns=ROLLOUT_COLUMNS,
        filter=pc.field("task_index").isin(wanted) & (pc.field("status") == OK),
    )
    rows = []
    for r in sorted(table.to_pylist(), key=lambda r: (r["task_index"], r["rollout_index"])):
        task = tasks[r["task_index"]]
        if r["task_id"] != task["task_id"]:
            raise TrainError(
                f"{layout.rollouts}: rollout {r['rollout_index']} of task {r['task_index']} "
                f"was generated for task_id {r['task_id']}, not {task['task_id']}; "
                "re-run the workflow (merge) so rollouts match the tasks table"
            )
        rows.append(
            {
                "task_index": r["task_index"],
                "kept": chosen[r["task_index"]],
                "prompt": json.loads(task["messages"]),
                "completion": r["completion"] or "",
                "reward": float(r["reward"]),
            }
        )
    if not rows:
        raise TrainError(f"{run_dir}: no ok rollouts of kept or control tasks to train on")
    note = {"source": "export", "n_control_tasks": sum(not v for v in chosen.values())}
    note["skipped_acting_tasks"] = acting
    return rows, note

"""The end of a run on one screen: per label what the export kept and dropped and why, the
signal, failures, what adaptive sampling saved, and where the files are. Printed by the
workflow's last step (rules/checks.smk, `onsuccess`) after a run that wrote a profile, so the
result is the last thing on the terminal, not ~700 lines of job logs above it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rewardprof.stages.adaptive_savings import savings_lines
from rewardprof.stages.profile_summary import format_table
from rewardprof.store.layout import RunLayout

NO_SIGNAL = ("all_fail", "all_pass")


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _rows(summary: dict[str, Any], export: dict[str, Any] | None) -> list[dict[str, Any]]:
    exported = {e["label"]: e for e in (export or {}).get("labels", [])}
    rows = []
    for lbl in summary.get("labels", []):
        row = {
            "label": lbl["label"],
            "tasks": lbl["tasks"],
            "rollouts": lbl["rollouts"],
            "failed": lbl["failed"],
            "mean_pass_rate": lbl.get("mean_pass_rate"),
            "mean_grpo_signal": lbl.get("mean_grpo_signal"),
        }
        if (e := exported.get(lbl["label"])) is not None:
            by = e.get("dropped_by", {})
            row |= {
                "kept": e["kept"],
                "dropped_no_signal": sum(by.get(r, 0) for r in NO_SIGNAL),
                "dropped_other": e["dropped"] - sum(by.get(r, 0) for r in NO_SIGNAL),
            }
        rows.append(row)
    return rows


def summary_lines(run_dir: Path, since: float = 0.0) -> list[str]:
    """The summary of the run in `run_dir`; [] when it has no profile, or none written at or
    after `since` (a run that only reran part of the DAG says nothing of an older profile)."""
    layout = RunLayout(run_dir)
    try:
        if layout.profile_summary.stat().st_mtime < since:
            return []
    except OSError:
        return []
    summary = _read(layout.profile_summary)
    if summary is None:
        return []
    export = _read(layout.export_report)
    overall = summary.get("overall", {})
    lines = [
        f"rewardprof: run {summary.get('run', run_dir.name)}: {overall.get('tasks')} tasks, "
        f"{overall.get('rollouts')} rollouts ({overall.get('failed')} failed, "
        f"{overall.get('truncated')} truncated)",
    ]
    rows = _rows(summary, export)
    if rows:
        lines += format_table(rows, list(max(rows, key=len))).splitlines()
    if export is not None:
        lines.append(
            f"kept for training: {export['kept']} of {export['tasks']} tasks "
            f"({layout.export_combined}); dropped {export['dropped']} (no_signal: every "
            "rollout got the same reward)"
        )
    if saved := summary.get("adaptive"):
        lines.extend(savings_lines(saved))
    lines.append(
        f"files: {layout.profile_summary}, {layout.profile_tasks} (per task), "
        f"{layout.export_report}; plots: snakemake --report report.html"
    )
    return lines

"""The end of a run on one screen: per label what the export kept and dropped and why, the
signal, failures, what adaptive sampling saved, and where the files are. Printed by the
workflow's last step (rules/checks.smk, `onsuccess`) after a run that wrote a profile, so the
result is the last thing on the terminal, not ~700 lines of job logs above it; and the front
page of `snakemake --report` (`front_page`: the same lines, then the plots)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

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
            "pass_rate": lbl.get("mean_pass_rate"),  # means over the label's tasks
            "grpo_signal": lbl.get("mean_grpo_signal"),
        }
        if (e := exported.get(lbl["label"])) is not None:
            by = e.get("dropped_by", {})
            row |= {
                "kept": e["kept"],
                "no_signal": sum(by.get(r, 0) for r in NO_SIGNAL),
                "other_drop": e["dropped"] - sum(by.get(r, 0) for r in NO_SIGNAL),
            }
        rows.append(row)
    return rows


def summary_parts(run_dir: Path, since: float = 0.0) -> tuple[str, list[dict], list[str]] | None:
    """(headline, per-label rows, the lines after the table) of the run in `run_dir`; None when
    it has no profile, or none written at or after `since` (a run that only reran part of the
    DAG says nothing of an older profile)."""
    layout = RunLayout(run_dir)
    try:
        if layout.profile_summary.stat().st_mtime < since:
            return None
    except OSError:
        return None
    summary = _read(layout.profile_summary)
    if summary is None:
        return None
    export = _read(layout.export_report)
    overall = summary.get("overall", {})
    head = (
        f"rewardprof: run {summary.get('run', run_dir.name)}: {overall.get('tasks')} tasks, "
        f"{overall.get('rollouts')} rollouts ({overall.get('failed')} failed, "
        f"{overall.get('truncated')} truncated)"
    )
    lines = []
    if export is not None:
        lines.append(
            f"kept for training: {export['kept']} of {export['tasks']} tasks, dropped "
            f"{export['dropped']} (no_signal: every rollout got the same reward;"
        )
        lines.append("  other_drop: another export rule, export/report.json says which)")
    if saved := summary.get("adaptive"):
        lines.extend(savings_lines(saved))
    lines.append(f"training set: {layout.export_combined} (report: {layout.export_report})")
    lines.append(f"profile: {layout.profile_summary}, per task {layout.profile_tasks}")
    lines.append("plots: snakemake --report report.html")
    return head, _rows(summary, export), lines


def summary_lines(run_dir: Path, since: float = 0.0) -> list[str]:
    """The summary as terminal lines ([] as summary_parts' None)."""
    parts = summary_parts(run_dir, since)
    if parts is None:
        return []
    head, rows, lines = parts
    table = format_table(rows, list(max(rows, key=len))).splitlines() if rows else []
    return [head, *table, *lines]


def _csv_cell(v: Any) -> str:
    return "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def front_page(run_dir: Path, plots: list[tuple[Path, str]]) -> str:
    """The report's front page, reStructuredText: the summary (its table as a table), then each
    (png, caption) inline (Snakemake embeds only the files a rule declares with report(), a
    page apart: these are the same plots, on the page the report opens on)."""
    out = ["Reward profile", "==============", ""]
    parts = summary_parts(run_dir)
    if parts is None:
        out.append(f"Run {run_dir.name}: no profile yet.")
    else:
        head, rows, lines = parts
        out += [head.removeprefix("rewardprof: ").capitalize(), ""]
        if rows:  # narrower than the terminal's: the page's column is shared with the graph
            cols = ["label", "tasks", "failed", "pass_rate", "signal", "kept", "dropped"]
            out += [".. csv-table::", "   :header: " + ", ".join(cols), ""]
            for r in rows:
                dropped = r["no_signal"] + r["other_drop"] if "kept" in r else None
                row = {**r, "signal": r["grpo_signal"], "dropped": dropped}
                out.append("   " + ", ".join(_csv_cell(row.get(c)) for c in cols))
        # the lines after the table as a list that wraps (a literal block would be cut off);
        # continuation lines join their item
        items: list[str] = []
        for line in lines:
            if line.startswith("  ") and items:
                items[-1] += " " + line.strip()
            else:
                items.append(line)
        out += ["", *[f"- {item}" for item in items]]
    for png, caption in plots:
        if png.is_file():
            # wrapped: docutils refuses lines over 10,000 characters, and a data URL's
            # base64 may hold whitespace (browsers drop it)
            data = base64.encodebytes(png.read_bytes()).decode().split()
            out += ["", f"**{caption}**", "", ".. raw:: html", ""]
            out += ['    <img style="max-width:100%" src="data:image/png;base64,']
            out += [f"    {chunk}" for chunk in data] + ['    ">']
    return "\n".join(out) + "\n"


def savings_lines(saved: dict[str, Any]) -> list[str]:
    """The end-of-run lines: one overall, one per label, one for the audit."""
    sent, fixed = saved["rollouts_sent"], saved["rollouts_at_fixed_k"]
    share = 100 * (1 - sent / fixed) if fixed else 0.0
    lines = [
        f"adaptive: {sent} rollouts sent of {fixed} at fixed K ({share:.1f} % saved), "
        f"{saved['tasks_stopped_early']} tasks stopped early"
    ]
    audit = saved.get("audit")
    audited_of = (audit or {}).get("labels_audited", {})
    for label, r in saved["labels"].items():
        audited = audited_of.get(label, 0)
        lines.append(
            f"adaptive: {label}: {r['rollouts_sent']} of {r['rollouts_at_fixed_k']} rollouts, "
            f"{r['tasks_stopped_early']} of {r['tasks']} tasks stopped early"
            + (f", {audited} audited (never stopped by the prior)" if audited else "")
        )
    if audit:
        lines.extend(_audit_lines(audit, sent))
    return lines


def _audit_lines(audit: dict[str, Any], sent: int) -> list[str]:
    """The audit in plain words: what it cost, what it measured, the setting that sizes it."""
    extra, n = audit["extra_rollouts"], audit["audited_tasks"]
    share = 100 * extra / sent if sent else 0.0
    knobs = audit.get("settings") or {}
    sized = (
        f" (adaptive.audit_share {knobs['audit_share']}, at least adaptive.audit_min_tasks "
        f"{knobs['audit_min_tasks']} per label)"
        if knobs
        else ""
    )
    lines = [
        f"adaptive: audit: {n} tasks never stopped by the prior, to check its stops{sized}, "
        f"costing {extra} rollouts ({share:.1f} % of those sent) beyond what stopping early "
        "needed"
    ]
    if audit["stopped_early"]:
        lines.append(
            f"adaptive: audit: the prior would have stopped {audit['stopped_early']} of the {n}; "
            f"{audit['agreed']} of those decided as fixed K does (share of tasks decided "
            f"otherwise: 95 % interval {audit['flip_rate_interval']})"
        )
    elif n:
        lines.append(
            f"adaptive: audit: the prior would have stopped none of the {n}, so it measured "
            "nothing; a lower adaptive.audit_min_tasks (0: the share alone) saves those rollouts"
        )
    for label, r in (audit.get("too_few_to_say") or {}).items():
        lines.append(
            f"adaptive: audit of label {label}: {r.get('audited_tasks', 0)} tasks, "
            f"{r.get('would_stop_early', 0)} of them stopped by the prior, flip-rate interval "
            f"{r.get('flip_rate_interval')}: too few to say (it would catch a flip rate of "
            f"{r.get('detectable_flip_rate', 1.0):.2f} or more, not delta's)"
        )
    return lines

"""What adaptive sampling saved, said in words at the end of the run (the profile job's
terminal lines) and in summary.json's `adaptive` section, which the report's tables show:
rollouts sent against fixed K, tasks stopped early per label, and the audit's agreement with
fixed K where the run has one (`results/<run>/adaptive/audit.json`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd


def savings(
    tasks: pd.DataFrame, prof: pd.DataFrame, labels: list[str], audit_path: Path
) -> dict[str, Any] | None:
    """Per label and overall: rollouts sent (the plan's), at fixed K (num_repeats), tasks
    stopped early; None when the run was not adaptive (no plan in the rollouts)."""
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
    out: dict[str, Any] = {
        "rollouts_sent": int(by_task["sent"].sum()),
        "rollouts_at_fixed_k": int(by_task["fixed_k"].sum()),
        "tasks_stopped_early": int(by_task["stopped_early"].sum()),
        "labels": rows,
    }
    audit = _audit(audit_path)
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

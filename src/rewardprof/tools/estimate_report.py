"""The markdown of a sizing estimate (estimation/sizing.py computes it)."""

from __future__ import annotations

from typing import Any


def _md_cell(value: Any) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int | float) else str(value)


def _md_table(rows: list[dict[str, Any]], cols: list[str]) -> list[str]:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    return out + ["| " + " | ".join(_md_cell(r.get(c)) for c in cols) + " |" for r in rows]


def _excluded(tot: dict[str, Any]) -> str:
    left_out = tot.get("useful_tasks_exclude") or []
    return f"; without {', '.join(left_out)}: no pilot data" if left_out else ""


def _hours_interval(tot: dict[str, Any]) -> str:
    if tot.get("gpu_hours_low") is None or tot.get("gpu_hours_high") is None:
        return ""
    return (
        f" (95 % interval over which tasks the pilot drew: {tot['gpu_hours_low']:,} to "
        f"{tot['gpu_hours_high']:,})"
    )


_PILOT_COLUMNS = [
    "label",
    "environment",
    "tasks",
    "rollouts",
    "mean_output_tokens",
    "cost_share",
    "rollouts_per_gpu_hour",
    "useful_fraction_at_pilot_k",
    "useful_basis",
]
_TARGET_COLUMNS = [
    "label",
    "basis",
    "tasks",
    "num_repeats",
    "rollouts",
    "rollouts_per_gpu_hour",
    "gpu_hours",
    "gpu_hours_low",
    "gpu_hours_high",
    "gpu_hours_exact",
    "gpu_hours_bayes",
    "useful_basis",
    "useful_fraction",
    "useful_fraction_low",
    "useful_fraction_high",
    "useful_tasks",
    "useful_tasks_per_gpu_hour",
]


def _pilot_lines(res: dict[str, Any]) -> list[str]:
    p, t = res["pilot"], res["target"]
    lines = [
        f"# Sizing estimate: {t['run']} from pilot {p['run_dir']}",
        "",
        f"Pilot: {p['rollouts']:,} rollouts in {p['jobs']} rollout job(s), "
        f"{p['gpu_hours']} GPU-hours of generation ({p['gpus_per_engine']} GPU(s) per "
        f"engine): {p['rollouts_per_gpu_hour']:,} rollouts and "
        f"{p['output_tokens_per_gpu_hour']:,} output tokens per GPU-hour; startup "
        f"overhead {p['startup_overhead_s']} s per job; GPU-hours split over labels by "
        f"{'output tokens' if p.get('cost_by', 'tokens') == 'tokens' else 'latency'}.",
        "",
        *(line for w in p.get("warnings", []) for line in (f"**Warning**: {w}.", "")),
        "## Pilot, per label",
        "",
    ]
    return lines + _md_table(res["pilot_labels"], _PILOT_COLUMNS)


def _total_line(t: dict[str, Any], tot: dict[str, Any]) -> str:
    return (
        f"**Total**: {tot['tasks']:,} tasks, {tot['rollouts']:,} rollouts, "
        f"{tot['gpu_hours']:,} GPU-hours of generation{_hours_interval(tot)} "
        f"({tot['gpu_hours_with_startup']:,} with engine startup), "
        f"wall time ≈ {tot['wall_hours']:,} h on {t['gpus']} GPU(s); "
        f"≈ {tot['useful_tasks']:,} useful tasks (K rollouts not all equal; ≈ 95 % interval, "
        "the labels' deviations added in quadrature: "
        f"{tot['useful_tasks_low']:,} to {tot['useful_tasks_high']:,}"
        f"{_excluded(tot)}), "
        f"{tot['useful_tasks_per_gpu_hour']} per GPU-hour. With adaptive sampling (expected, "
        f"under each label's fitted prior): exact {tot['gpu_hours_exact']:,} GPU-hours, "
        f"bayes {tot['gpu_hours_bayes']:,}."
    )


def to_markdown(res: dict[str, Any]) -> str:
    t, tot = res["target"], res["total"]
    lines = _pilot_lines(res)
    lines += [
        "",
        f"## Full config on {t['gpus']} GPU(s) ({t['engines']} engine(s), "
        f"{t['rollout_jobs']} rollout jobs in {t['waves']} wave(s))",
        "",
    ]
    lines += _md_table(res["labels"], _TARGET_COLUMNS)
    lines += ["", _total_line(t, tot), ""]
    return "\n".join(lines)

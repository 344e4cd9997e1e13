"""Per-environment (label) summary of a task profile, and the terminal table.

Labels are split by the materialize report's [start, end) index ranges, not by environment
name: two entries may share an environment. docs/profile.md defines every field.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

HIST_EDGES = [round(x, 1) for x in np.linspace(0.0, 1.0, 11)]


def _f(x: Any) -> float | None:
    return None if x is None or pd.isna(x) else round(float(x), 6)


def _share(mask: pd.Series, among: pd.Series) -> float | None:
    return _f(mask[among].mean()) if among.any() else None


def _signal_shares(part: pd.DataFrame, has: pd.Series) -> dict[str, float | None]:
    """Shares by reward variance (what GRPO sees), not by the pass rate alone: a task with
    rewards {0, 0.5} has pass rate 0 and signal. Posterior means over the label's tasks."""
    var = part["num_distinct_rewards"] > 1
    rate = part["pass_rate"]
    out = {
        "share_all_fail": _share(~var & (rate == 0), has),
        "share_all_pass": _share(~var & (rate == 1), has),
        "share_useful": _share(var, has),
    }
    for col, key in (("post_signal", "mean_post_signal"), ("post_p_signal", "mean_post_p_signal")):
        out[key] = _f(part[col].mean()) if col in part else None
    if "stopped_early" in part:  # adaptive sampling
        out["tasks_stopped_early"] = int(part["stopped_early"].sum())
    return out


def _token_stats(tokens: np.ndarray) -> dict[str, float | None]:
    tokens = tokens[~np.isnan(tokens)]
    if not len(tokens):
        return {"mean": None, "p50": None, "p90": None, "max": None, "total": 0}
    p50, p90 = np.percentile(tokens, [50, 90])
    return {
        "mean": _f(tokens.mean()),
        "p50": _f(p50),
        "p90": _f(p90),
        "max": _f(tokens.max()),
        "total": int(tokens.sum()),
    }


def _rollout_entry(report: dict[str, Any], rollouts: pd.DataFrame | None) -> np.ndarray | None:
    """Index into report['entries'] of every rollout (-1 when outside every range)."""
    if rollouts is None:
        return None
    starts = np.array([e["start"] for e in report["entries"]])
    ends = np.array([e["end"] for e in report["entries"]])
    ti = rollouts["task_index"].to_numpy()
    idx = np.searchsorted(starts, ti, side="right") - 1
    inside = (idx >= 0) & (ti < ends[np.clip(idx, 0, None)])
    return np.where(inside, idx, -1)


def label_summary(
    prof: pd.DataFrame, report: dict[str, Any], rollouts: pd.DataFrame | None = None
) -> list[dict[str, Any]]:
    entry_of = _rollout_entry(report, rollouts)
    tokens = (
        rollouts["completion_tokens"].to_numpy(dtype=float, na_value=np.nan)
        if rollouts is not None
        else None
    )
    pass_at = [c for c in prof.columns if c.startswith("pass@")]
    kinds = [c for c in prof.columns if c.startswith("num_failed/")]
    ti = prof["task_index"].to_numpy()
    ordered = bool(len(ti) == 0 or (ti[0] == 0 and (np.diff(ti) == 1).all()))
    rows = []
    for i, e in enumerate(report["entries"]):
        part = (
            prof.iloc[e["start"] : e["end"]]
            if ordered
            else prof[(prof["task_index"] >= e["start"]) & (prof["task_index"] < e["end"])]
        )
        expected = int(part["expected_num_rollouts"].sum())
        rate = part["pass_rate"]
        has = rate.notna()
        row: dict[str, Any] = {
            "label": e["label"],
            "environment": e["environment"],
            "tasks": len(part),
            "tasks_with_rollouts": int(has.sum()),
            "rollouts": int(part["num_rollouts"].sum()),
            "expected_rollouts": expected,
            "missing_rollouts": int(part["missing_num_rollouts"].sum()),
            "failed": int(part["num_failed"].sum()),
            "failed_by_kind": {
                k.split("/", 1)[1]: int(part[k].sum()) for k in kinds if part[k].sum()
            },
            "truncated": int(part["num_truncated"].sum()),
            "mean_reward": _f(part["mean/reward"].mean()),
            "mean_pass_rate": _f(rate.mean()),
            "mean_pass_rate_excl_truncated": _f(part["pass_rate_excl_truncated"].mean()),
            **{f"mean_{c}": _f(part[c].mean()) for c in pass_at},
            "share_pass_rate_0": _share(rate == 0, has),
            "share_pass_rate_1": _share(rate == 1, has),
            **_signal_shares(part, has),
            "mean_grpo_signal": _f(part["grpo_signal"].mean()),
            "pass_rate_histogram": {
                "edges": HIST_EDGES,
                "counts": np.histogram(rate[has], bins=HIST_EDGES)[0].tolist(),
            },
            "mean_output_tokens": _f(part["mean/output_tokens"].mean()),
            "failure_rate": _f(part["num_failed"].sum() / expected) if expected else None,
            "truncation_rate": _f(part["num_truncated"].sum() / expected) if expected else None,
        }
        if entry_of is not None:
            row["output_tokens"] = _token_stats(tokens[entry_of == i])
        rows.append(row)
    return rows


def overall_summary(prof: pd.DataFrame) -> dict[str, Any]:
    rate = prof["pass_rate"]
    has = rate.notna()
    return {
        "tasks": len(prof),
        "rollouts": int(prof["num_rollouts"].sum()),
        "expected_rollouts": int(prof["expected_num_rollouts"].sum()),
        "failed": int(prof["num_failed"].sum()),
        "truncated": int(prof["num_truncated"].sum()),
        "mean_reward": _f(prof["mean/reward"].mean()),
        "mean_pass_rate": _f(rate.mean()),
        "share_pass_rate_0": _share(rate == 0, has),
        "share_pass_rate_1": _share(rate == 1, has),
        **_signal_shares(prof, has),
        "mean_grpo_signal": _f(prof["grpo_signal"].mean()),
    }


TABLE_COLUMNS = [
    "label",
    "environment",
    "tasks",
    "rollouts",
    "failed",
    "truncated",
    "mean_reward",
    "mean_pass_rate",
    "share_pass_rate_0",
    "share_pass_rate_1",
    "mean_grpo_signal",
]


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def format_table(rows: list[dict[str, Any]], cols: list[str] | None = None) -> str:
    """Fixed-width text table of the per-label summary (what `profile` prints at the end)."""
    cols = cols or TABLE_COLUMNS
    body = [[_cell(r.get(c)) for c in cols] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(cols)]

    def line(vals: list[str]) -> str:
        return "  ".join(v.ljust(w) for v, w in zip(vals, widths, strict=True)).rstrip()

    return "\n".join([line(cols), line(["-" * w for w in widths])] + [line(b) for b in body])

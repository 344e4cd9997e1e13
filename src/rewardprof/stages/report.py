"""report: plots and tables of a profile, for `snakemake --report report.html` (rules/report.smk).

Writes into one directory:
  pass_rate_hist.png       pass-rate histogram per label (environment entry)
  tokens_vs_pass_rate.png  mean output tokens vs pass rate: per task (up to 20k sampled) and
                           per label
  failures.png             failure rate by kind and truncation rate per label
  labels.csv               the per-label summary table
  export.csv               kept/dropped per label (when an export report is given)
Needs matplotlib (`pip install rewardprof[report]`).
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import pyarrow.parquet as pq

from rewardprof.core.atomic import atomic_path
from rewardprof.core.extras import require
from rewardprof.stages import ReportPaths
from rewardprof.stages.run_summary import front_page
from rewardprof.store.layout import REPORT_FILES

if TYPE_CHECKING:
    from rewardprof.core.config import Config

_LABEL_COLUMNS = [
    "label",
    "environment",
    "tasks",
    "rollouts",
    "expected_rollouts",
    "failed",
    "truncated",
    "mean_reward",
    "mean_pass_rate",
    "mean_pass_rate_excl_truncated",
    "share_pass_rate_0",
    "share_pass_rate_1",
    "share_all_fail",
    "share_all_pass",
    "share_useful",
    "mean_grpo_signal",
    "mean_post_signal",
    "mean_post_p_signal",
    "mean_output_tokens",
    "failure_rate",
    "truncation_rate",
]
_MAX_POINTS = 20000


def _plt():
    matplotlib = require("matplotlib", "rewardprof report (the plots)", "report")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # optional: the report extra

    return plt


def _save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")


def _pass_rate_histograms(labels: list[dict[str, Any]], path: Path) -> None:
    plt = _plt()
    cols = min(4, max(1, len(labels)))
    rows = math.ceil(len(labels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax in axes.flat[len(labels) :]:
        ax.axis("off")
    for ax, lab in zip(axes.flat, labels, strict=False):
        hist = lab["pass_rate_histogram"]
        edges = np.array(hist["edges"])
        ax.bar(
            edges[:-1],
            hist["counts"],
            width=np.diff(edges),
            align="edge",
            edgecolor="white",
            color="tab:blue",
        )
        ax.set_title(f"{lab['label']} ({lab['environment']})", fontsize=9)
        ax.set_xlim(0, 1)
        ax.set_xlabel("pass rate", fontsize=8)
        ax.set_ylabel("tasks", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle("Pass rate per task, by label")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _steps_by_environment(labels: list[dict[str, Any]]) -> dict[str, dict[int, int]]:
    """The summary's per-label steps histograms summed per environment (labels that act)."""
    out: dict[str, dict[int, int]] = {}
    for lab in labels:
        for steps, n in (lab.get("steps_histogram") or {}).items():
            env = out.setdefault(lab["environment"], {})
            env[int(steps)] = env.get(int(steps), 0) + n
    return out


def _steps_histograms(labels: list[dict[str, Any]], path: Path) -> None:
    fig = _steps_figure(labels)
    _save(fig, path)
    _plt().close(fig)


def _steps_figure(labels: list[dict[str, Any]]):
    """Model turns per episode, one panel per environment that acts (a note without an axis
    when none does: the file is a declared output either way)."""
    plt = _plt()
    by_env = _steps_by_environment(labels)
    cols = min(4, max(1, len(by_env)))
    rows = max(1, math.ceil(len(by_env) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax in axes.flat[len(by_env) :]:
        ax.axis("off")
    if not by_env:
        axes.flat[0].axis("off")
        axes.flat[0].text(0.5, 0.5, "No environment in this run acts", ha="center", va="center")
    for ax, (env, counts) in zip(axes.flat, sorted(by_env.items()), strict=False):
        steps = sorted(counts)
        ax.bar(steps, [counts[k] for k in steps], width=0.8, color="tab:green")
        ax.set_title(env, fontsize=9)
        ax.set_xticks(steps)
        ax.set_xlabel("model turns", fontsize=8)
        ax.set_ylabel("episodes", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle("Turns per episode, by environment")
    fig.tight_layout()
    return fig


def _tokens_vs_pass_rate(profile_path: Path, labels: list[dict[str, Any]], path: Path) -> None:
    plt = _plt()
    t = pq.read_table(profile_path, columns=["label", "pass_rate", "mean/output_tokens"])
    rate = t.column("pass_rate").to_numpy().astype(float)
    tokens = t.column("mean/output_tokens").to_numpy().astype(float)
    keep = ~np.isnan(rate) & ~np.isnan(tokens)
    idx = np.flatnonzero(keep)
    if len(idx) > _MAX_POINTS:
        idx = np.sort(np.random.default_rng(0).choice(idx, _MAX_POINTS, replace=False))
    names = np.asarray(t.column("label").to_pylist(), dtype=object)[idx]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    jitter = np.random.default_rng(1).uniform(-0.01, 0.01, len(idx))
    many = len(labels) > 10
    for lab in labels:
        mine = names == lab["label"]
        left.scatter(
            rate[idx][mine] + jitter[mine],
            tokens[idx][mine],
            s=6,
            alpha=0.5,
            label=None if many else lab["label"],
            color="tab:blue" if many else None,
        )
    left.set_xlabel("pass rate")
    left.set_ylabel("mean output tokens")
    left.set_title(f"per task ({len(idx)} of {int(keep.sum())} shown)")
    if not many and labels:
        left.legend(fontsize=7)
    for lab in labels:
        if lab["mean_pass_rate"] is not None and lab["mean_output_tokens"] is not None:
            right.scatter(lab["mean_pass_rate"], lab["mean_output_tokens"], s=30)
            right.annotate(
                lab["label"],
                (lab["mean_pass_rate"], lab["mean_output_tokens"]),
                fontsize=7,
                xytext=(3, 3),
                textcoords="offset points",
            )
    right.set_xlim(-0.05, 1.05)
    right.set_xlabel("mean pass rate")
    right.set_ylabel("mean output tokens")
    right.set_title("per label")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _failure_bars(labels: list[dict[str, Any]], path: Path) -> None:
    plt = _plt()
    fig = _failure_figure(labels)
    _save(fig, path)
    plt.close(fig)


def _failure_figure(labels: list[dict[str, Any]]):
    """Failure rate by kind (stacked) and truncation rate per label; with neither, a figure
    that says so instead of empty bars on an axis around 0."""
    plt = _plt()
    kinds = sorted({k for lab in labels for k, n in lab.get("failed_by_kind", {}).items() if n})
    names = [lab["label"] for lab in labels]
    trunc = [lab["truncation_rate"] or 0.0 for lab in labels]
    if not kinds and not any(trunc):
        fig, ax = plt.subplots(figsize=(8, 1.5))
        ax.axis("off")
        rollouts = sum(lab["expected_rollouts"] for lab in labels)
        ax.text(
            0.5,
            0.5,
            f"No failed or truncated rollouts ({rollouts} rollouts, {len(labels)} labels)",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_title("Failures by kind and truncation, by label")
        return fig
    y = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(8, 1 + 0.35 * max(len(labels), 2)))
    left = np.zeros(len(labels))
    for kind in kinds:
        rates = np.array(
            [
                lab["failed_by_kind"].get(kind, 0) / lab["expected_rollouts"]
                if lab["expected_rollouts"]
                else 0.0
                for lab in labels
            ]
        )
        ax.barh(y - 0.2, rates, height=0.4, left=left, label=f"failed: {kind}")
        left += rates
    ax.barh(y + 0.2, trunc, height=0.4, color="tab:gray", label="truncated (length)")
    ax.set_xlim(0, 1.1 * max(float(left.max()), max(trunc)))
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of expected rollouts")
    ax.set_title("Failures by kind and truncation, by label")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def _label_table(summary: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]]:
    """The per-label table; with adaptive sampling, what it saved per label (sent vs fixed K,
    stopped early) as three more columns."""
    saved = summary.get("adaptive")
    if not saved:
        return _LABEL_COLUMNS, summary["labels"]
    extra = ["rollouts_sent", "rollouts_at_fixed_k", "tasks_stopped_early"]
    rows = [{**lab, **saved["labels"].get(lab["label"], {})} for lab in summary["labels"]]
    return [*_LABEL_COLUMNS, *extra], rows


def _write_csv(path: Path, cols: list[str], rows: list[dict[str, Any]]) -> None:
    with atomic_path(path) as tmp, tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if r.get(c) is None else r.get(c) for c in cols])


class ReportReport(TypedDict):
    written: list[str]


def run(cfg: Config | None, paths: ReportPaths) -> ReportReport:
    """Plots and tables of the profile (paths.profile, paths.summary) and, when given, of the
    export report (paths.export_report), into paths.out; report the files written. Needs no
    config."""
    out = paths.out
    out.mkdir(parents=True, exist_ok=True)
    summary = json.loads(paths.summary.read_text())
    labels = summary["labels"]
    file = {key: out / name for key, name in REPORT_FILES.items()}  # the names RunLayout gives
    _pass_rate_histograms(labels, file["hist"])
    _tokens_vs_pass_rate(paths.profile, labels, file["tokens"])
    _failure_bars(labels, file["failures"])
    _steps_histograms(labels, file["steps"])
    _write_csv(file["labels"], *_label_table(summary))
    written = [file["hist"], file["tokens"], file["failures"], file["steps"], file["labels"]]
    if paths.export_report:
        ex = json.loads(paths.export_report.read_text())
        reasons = sorted({k for lab in ex["labels"] for k in lab["dropped_by"]})
        rows = [
            {**lab, **{f"dropped/{k}": lab["dropped_by"][k] for k in reasons}}
            for lab in ex["labels"]
        ]
        cols = [
            "label",
            "environment",
            "tasks",
            "kept",
            "dropped",
            *[f"dropped/{k}" for k in reasons],
            "weight",
            "kept_share",
            "target_share",
        ]
        _write_csv(file["export"], cols, rows)
        written.append(file["export"])
    plots = [(file["hist"], "Pass rate per label"), (file["failures"], "Failures and truncation")]
    plots.append((file["tokens"], "Output tokens vs pass rate"))
    with atomic_path(file["front_page"]) as tmp:
        tmp.write_text(front_page(paths.run_dir.root, plots))
    written.append(file["front_page"])
    return {"written": [str(p) for p in written]}

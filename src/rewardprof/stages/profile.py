"""profile: one row per task with its reward distribution, split per entry by index range.

Rewards are over ok rollouts only; failures are counted by kind (`num_failed/<kind>`) and never
enter a mean as 0 (an "ok" record without a reward counts as a verifier_error, so every task has
num_rollouts + num_failed + missing_num_rollouts == expected_num_rollouts). A rollout passes
when reward >= profile.pass_threshold. Token statistics are over every rollout that produced a
completion. Every column is computed with whole-array
operations keyed by task position (np.bincount, one pandas groupby for min/max/median), so a
sweep of millions of rollouts profiles in seconds; docs/profile.md defines each column.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rewardprof.core.atomic import atomic_path, write_json_atomic
from rewardprof.core.config import Config
from rewardprof.core.kinds import OK, FailureKind
from rewardprof.decisions.priors.bins import COVERAGE_MIN_TASKS, widened
from rewardprof.decisions.priors.label import MIN_TASKS
from rewardprof.decisions.priors.posterior import POSTERIOR_COLUMNS, fit_prior, posterior_columns
from rewardprof.decisions.statistics.per_task import (
    grpo_signal_array,
    interval_arrays,
    pass_at_k_array,
)
from rewardprof.stages import ProfilePaths
from rewardprof.stages.profile_episodes import episode_columns, read_episodes, steps_histograms
from rewardprof.stages.profile_summary import label_summary, overall_summary
from rewardprof.store.jsonl import write_table_jsonl
from rewardprof.store.layout import ProfileFiles
from rewardprof.store.plans import planned_per_task, read_plans

_ROLLOUT_COLS = [
    "task_index",
    "rollout_index",
    "status",
    "reward",
    "finish_reason",
    "completion_tokens",
]
_VERIFIER_ERROR = FailureKind.VERIFIER_ERROR
_TASK_COLS = ["task_index", "task_id", "label", "environment", "num_repeats", "row"]


def _positions(tasks: pd.DataFrame, task_index: np.ndarray) -> np.ndarray:
    """Row position of each rollout's task in `tasks` (-1 when the task is not there)."""
    ti = tasks["task_index"].to_numpy()
    if len(ti) and ti[0] == 0 and ti[-1] == len(ti) - 1 and (np.diff(ti) == 1).all():
        pos = task_index.astype(np.int64)
        pos[(pos < 0) | (pos >= len(ti))] = -1
        return pos
    return pd.Index(ti).get_indexer(task_index)


def _describe(pos: np.ndarray, values: np.ndarray, num_tasks: int, name: str) -> dict[str, Any]:
    """mean/std (population)/min/max/median of `values` per task position; NaN for none."""
    count = np.bincount(pos, minlength=num_tasks).astype(float)
    total = np.bincount(pos, weights=values, minlength=num_tasks)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(count > 0, total / count, np.nan)
        # second pass on deviations: no cancellation from sum-of-squares
        dev = values - mean[pos]
        var = np.bincount(pos, weights=dev * dev, minlength=num_tasks) / count
    agg = pd.Series(values).groupby(pos).agg(["min", "max", "median"]).reindex(range(num_tasks))
    return {
        f"mean/{name}": mean,
        f"std/{name}": np.sqrt(var),
        f"min/{name}": agg["min"].to_numpy(),
        f"max/{name}": agg["max"].to_numpy(),
        f"median/{name}": agg["median"].to_numpy(),
    }


def _reward_value_signal(
    pos: np.ndarray, reward: np.ndarray, n_ok: np.ndarray, group_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """(1 - sum_v q_v^G, number of distinct reward values) per task; see stats.py."""
    num_tasks = len(n_ok)
    if not len(pos):
        return np.full(num_tasks, np.nan), np.zeros(num_tasks, dtype=np.int64)
    counts = (
        pd.DataFrame({"pos": pos, "v": np.round(reward, 9)})
        .groupby(["pos", "v"], sort=False)
        .size()
    )
    p_of = counts.index.get_level_values("pos").to_numpy()
    q = counts.to_numpy() / n_ok[p_of]
    same = np.bincount(p_of, weights=q**group_size, minlength=num_tasks)
    distinct = np.bincount(p_of, minlength=num_tasks)
    return np.where(n_ok > 0, 1.0 - same, np.nan), distinct


def _binary_labels(prof: pd.DataFrame) -> dict[str, bool]:
    """label -> every scored reward of the label is 0 or 1."""
    lo_hi = prof[["min/reward", "max/reward"]]
    ok = (lo_hi.isin([0.0, 1.0]).all(axis=1) & (prof["num_distinct_rewards"] <= 2)) | (
        prof["num_rollouts"] == 0
    )
    return ok.groupby(prof["label"].to_numpy(dtype=object), sort=False).all().to_dict()


def _posterior_cols(
    cfg: Config, prof: pd.DataFrame, pos: np.ndarray, reward: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[str, dict[str, Any]]]:
    """post_* columns (docs/profile.md) and each label's fitted priors (for summary.json).

    Pass-rate mean and interval: posterior of the pass rate under the label's empirical-Bayes
    prior, fitted on its tasks' (num_rollouts, num_passed) (decisions/priors/posterior.py). Signal
    columns: the same posterior for a label whose rewards are all 0/1; for a label with other
    rewards, the posterior of q = P(reward == v*), v* the label's most common reward, under a prior
    fitted the same way on that indicator: 1 - q^G - (1-q)^G is a lower bound of the chance
    that a group's rewards differ (exact when a task's rewards take v* and one other value).
    A label with fewer than MIN_TASKS scored tasks uses the prior fitted on every label's
    tasks (`prior_source` "pooled"), and summary.json flags a prior fitted on fewer. Credible
    intervals are widened to cover a histogram prior's too (decisions/priors/bins.py: the family
    alone undercovers off-family labels), and flagged where that was not enough when measured
    (`interval_coverage`)."""
    p = cfg.profile
    n = prof["num_rollouts"].to_numpy()
    c = prof["num_passed"].to_numpy()
    labels = prof["label"].to_numpy(dtype=object)
    rounded = np.round(reward, 9)
    out = {k: np.full(len(n), np.nan) for k in POSTERIOR_COLUMNS}
    out["prior_source"] = np.full(len(n), "label", dtype=object)
    out["interval_coverage"] = np.full(len(n), "widened", dtype=object)
    settings = {"level": p.ci_level, "group_size": p.group_size, "min_signal": p.signal_threshold}
    priors: dict[str, dict[str, Any]] = {}
    pooled = fit_prior(n, c)
    for lbl, binary in _binary_labels(prof).items():
        rows = labels == lbl
        tasks = int((n[rows] > 0).sum())
        # below MIN_TASKS a label's own fit is near-degenerate (docs/profile.md): the pool's
        source = "label" if tasks >= MIN_TASKS else "pooled"
        prior = fit_prior(n[rows], c[rows]) if source == "label" else pooled
        cols = posterior_columns(prior, n[rows], c[rows], **settings)
        lo, hi, coverage = widened(
            n[rows], c[rows], cols["post_ci_low"], cols["post_ci_high"], p.ci_level
        )
        cols["post_ci_low"], cols["post_ci_high"] = lo, hi
        out["prior_source"][rows] = source
        out["interval_coverage"][rows] = coverage
        priors[lbl] = {
            "pass_rate": prior.as_dict(),
            "source": source,
            "label_tasks": tasks,
            "min_tasks": MIN_TASKS,
            "too_few_tasks": prior.tasks < MIN_TASKS,
            "interval_coverage": coverage,
            "coverage_min_tasks": COVERAGE_MIN_TASKS,
        }
        if not binary:
            of_label = rows[pos]
            view, priors[lbl]["reward_equals"] = _top_reward_signal(
                n, rows, pos[of_label], rounded[of_label], settings
            )
            cols["post_signal"], cols["post_p_signal"] = view["post_signal"], view["post_p_signal"]
        for k in POSTERIOR_COLUMNS:
            out[k][rows] = cols[k]
    return out, priors


def _top_reward_signal(
    n: np.ndarray, rows: np.ndarray, pos: np.ndarray, rounded: np.ndarray, settings: dict
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A label with rewards other than 0/1 (`rows` its tasks; `pos`, `rounded`: its rewards):
    the posterior columns of q = P(reward == v*), v* its most common reward, and that prior."""
    values, counts = np.unique(rounded, return_counts=True)
    top = float(values[np.argmax(counts)])
    hits = np.bincount(pos[rounded == top], minlength=len(n))[rows]
    signal_prior = fit_prior(n[rows], hits)
    view = posterior_columns(signal_prior, n[rows], hits, **settings)
    return view, {"value": top, **signal_prior.as_dict()}


def task_profile(
    cfg: Config, tasks: pd.DataFrame, rollouts: pd.DataFrame, plans: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per task; `plans` (task_index, planned, stopped_early, keep): adaptive
    sampling's plan from the rollout outputs, which sets each task's expected rollouts."""
    p = cfg.profile
    T = len(tasks)
    pos_all = _positions(tasks, rollouts["task_index"].to_numpy())
    known = pos_all >= 0
    r = rollouts if known.all() else rollouts[known]  # no copy of millions of rows if all known
    pos = pos_all[known]
    # status as category codes: comparing millions of Python strings costs seconds and GBs
    status_cat = pd.Categorical(r["status"])
    codes, kinds = status_cat.codes, list(status_cat.categories)
    is_ok = codes == (kinds.index(OK) if OK in kinds else -2)
    reward = r["reward"].to_numpy(dtype=float, na_value=np.nan)
    ok = is_ok & ~np.isnan(reward)
    # "ok" without a reward (older runs; rollout now records verifier_error) is a verifier
    # failure, so ok + failed + missing == expected for every task
    no_reward = is_ok & ~ok
    truncated = (r["finish_reason"] == "length").to_numpy()

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(pos[mask], minlength=T)

    cols = _described(tasks, r, pos, ok, reward)
    n = count(ok)
    expected = tasks["num_repeats"].to_numpy().astype(np.int64)
    if plans is not None:  # adaptive sampling: the rollouts the plan needed
        expected = _with_plan(cols, plans, tasks["task_index"].to_numpy(), expected)
    cols["num_rollouts"] = n
    cols["expected_num_rollouts"] = expected
    cols["missing_num_rollouts"] = expected - np.bincount(pos, minlength=T)
    failed = ~ok
    cols["num_failed"] = count(failed)
    cols.update(_failure_counts(count, codes, kinds, no_reward))
    cols["num_truncated"] = count(truncated)
    passed = ok & (reward >= p.pass_threshold)
    c = count(passed)
    cols["num_passed"] = c
    # pass rates with and without truncated rollouts (a truncated answer is rarely right)
    rate = _rate(c, n)
    cols["pass_rate"] = rate
    cols["pass_rate_excl_truncated"] = _rate(count(passed & ~truncated), count(ok & ~truncated))
    for k in p.pass_at_k:
        cols[f"pass@{k}"] = pass_at_k_array(n, c, k)
    lo, hi = interval_arrays(c, n, p.ci_level, p.ci_method)
    cols["pass_rate_ci_low"], cols["pass_rate_ci_high"] = lo, hi
    signal, distinct = _reward_value_signal(pos[ok], reward[ok], n, p.group_size)
    cols["grpo_signal"] = signal
    cols["grpo_signal_pass"] = grpo_signal_array(rate, p.group_size)
    cols["num_distinct_rewards"] = distinct
    prof = _with_priors(cfg, pd.DataFrame(cols), pos[ok], reward[ok])
    prof["sample"] = tasks["row"].array
    return prof


def _with_priors(
    cfg: Config, prof: pd.DataFrame, pos: np.ndarray, reward: np.ndarray
) -> pd.DataFrame:
    """binary_rewards, pass@k nulled where it means nothing, the post_* columns and the
    labels' fitted priors (prof.attrs["priors"], for summary.json)."""
    # a label's rewards are binary when every scored one is 0 or 1; pass@k counts passes as
    # successes, which only means "at least one of k right" for such labels (wordle's 1.4,
    # newton_bench's -0.49 are not a pass or a fail): null for the others
    binary = prof["label"].map(_binary_labels(prof)).fillna(True).to_numpy(dtype=bool)
    prof["binary_rewards"] = binary
    for k in cfg.profile.pass_at_k:
        prof.loc[~binary, f"pass@{k}"] = np.nan
    post, priors = _posterior_cols(cfg, prof, pos, reward)
    for k, v in post.items():
        prof[k] = v
    prof.attrs["priors"] = priors  # label -> fitted priors, for summary.json
    return prof


def _described(
    tasks: pd.DataFrame, r: pd.DataFrame, pos: np.ndarray, ok: np.ndarray, reward: np.ndarray
) -> dict[str, Any]:
    """The task's identity columns, then its rewards' and output tokens' statistics."""
    T = len(tasks)
    tokens = r["completion_tokens"].to_numpy(dtype=float, na_value=np.nan)
    has_tokens = ~np.isnan(tokens)
    # .array keeps Arrow-backed strings as they are (no object-array round trip)
    cols: dict[str, Any] = {
        c: tasks[c].array for c in ("task_index", "task_id", "label", "environment")
    }
    cols.update(_describe(pos[ok], reward[ok], T, "reward"))
    cols.update(_describe(pos[has_tokens], tokens[has_tokens], T, "output_tokens"))
    return cols


def _rate(c: np.ndarray, n: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, c / np.maximum(n, 1), np.nan)


def _failure_counts(count, codes: np.ndarray, kinds: list, no_reward: np.ndarray) -> dict:
    """num_failed/<kind> per task (`count`: a mask's count per task); an ok rollout without a
    reward counts as a verifier_error."""
    out = {}
    for kind in sorted(set(kinds) - {OK} | ({_VERIFIER_ERROR} if no_reward.any() else set())):
        of_kind = codes == (kinds.index(kind) if kind in kinds else -2)
        out[f"num_failed/{kind}"] = count(
            of_kind | no_reward if kind == _VERIFIER_ERROR else of_kind
        )
    return out


def _with_plan(
    cols: dict[str, Any], plans: pd.DataFrame, task_index: np.ndarray, expected: np.ndarray
) -> np.ndarray:
    """The plan's columns (stopped_early, adaptive_keep) added; each task's planned rollouts."""
    planned, cols["stopped_early"], cols["adaptive_keep"] = planned_per_task(
        plans, task_index, expected
    )
    return planned


def _read_inputs(
    tasks_path: str | Path, rollouts_path: str | Path
) -> tuple[pd.DataFrame, pd.DataFrame]:
    tasks = pq.read_table(tasks_path, columns=_TASK_COLS).to_pandas()
    rollouts = pq.read_table(rollouts_path, columns=_ROLLOUT_COLS).to_pandas()
    return tasks, rollouts


class ProfileSummary(TypedDict):
    run: str
    num_tasks: int
    profile: dict[str, Any]
    labels: list[dict[str, Any]]
    overall: dict[str, Any]
    adaptive: NotRequired[dict[str, Any]]


def _write_tables(table: pa.Table, entries: list[dict[str, Any]], out: ProfileFiles) -> None:
    """The tasks table (Parquet, JSONL) and one table per entry's index range."""
    with atomic_path(out.tasks) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    write_table_jsonl(table, out.jsonl, raw=("sample",))
    for e in entries:
        part = table.filter(
            pc.and_(
                pc.greater_equal(table["task_index"], e["start"]),
                pc.less(table["task_index"], e["end"]),
            )
        )
        with atomic_path(out.by_label(e["label"])) as tmp:
            pq.write_table(part, tmp, compression="zstd")


def run(cfg: Config, paths: ProfilePaths) -> ProfileSummary:
    """Profile the rollouts (paths.rollouts) of the tasks (paths.tasks) into paths.out: tasks
    table (Parquet, JSONL), one table per label (split by the index ranges of the materialize
    report, paths.report) and summary.json (also returned), with what adaptive sampling saved
    (paths.savings, when sampling was adaptive)."""
    tasks, rollouts = _read_inputs(paths.tasks, paths.rollouts)
    report = json.loads(paths.report.read_text())
    merged = paths.rollouts
    files = sorted(merged.rglob("*.parquet")) if merged.is_dir() else [merged]
    prof = task_profile(cfg, tasks, rollouts, read_plans(files))
    episodes = read_episodes(cfg, merged)
    for name, values in episode_columns(episodes, tasks).items():
        prof.insert(len(prof.columns) - 1, name, values)  # before `sample`, the row
    table = pa.Table.from_pandas(prof, preserve_index=False)
    _write_tables(table, report["entries"], paths.out)
    labels = label_summary(prof.drop(columns="sample"), report, rollouts)
    steps = steps_histograms(episodes)
    for row in labels:
        row["prior"] = prof.attrs["priors"].get(row["label"])
        if episodes is not None:  # runs with no environment that acts keep their summary
            row["steps_histogram"] = steps.get(row["label"])
    summary: ProfileSummary = {
        "run": cfg.run,
        "num_tasks": len(prof),
        "profile": cfg.profile.model_dump(mode="json"),
        "labels": labels,
        "overall": overall_summary(prof),
    }
    saved = json.loads(paths.savings.read_text()) if paths.savings is not None else None
    if saved is not None:
        summary["adaptive"] = saved
    write_json_atomic(paths.out.summary, summary)
    return summary

"""`estimate` on constructed pilot run directories: interrupted and resumed rollout jobs, and the
GPU-hours interval (no engine: the journal columns and benchmark files a pilot leaves)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rewardprof.estimation.signal import (
    adaptive_rollouts,
    group_value_counts,
    value_counts_of,
    variance_rollouts,
)
from rewardprof.estimation.startup import attempt_of
from rewardprof.manifest.load import validate_config
from rewardprof.store.layout import RunLayout
from rewardprof.tools.estimate import estimate, measure_pilot
from rewardprof.tools.estimate_report import to_markdown

TASKS_PER_SHARD = 4


def _pilot_dir(root, shards: list[list[tuple[float, float]]], passes=None):
    """A pilot of len(shards) rollout jobs; shards[i]: its attempts in order, each (startup s,
    generation span s); the benchmark file times the last attempt (what Snakemake keeps).
    Every attempt writes one rollout per task of its shard at 10 output tokens (the last
    attempt's rows are the ones merged); `passes`: extra adaptive writer passes of a shard."""
    layout = RunLayout(root)
    n = len(shards)
    tasks = n * TASKS_PER_SHARD
    layout.materialize_report.parent.mkdir(parents=True)
    entry = {"label": "a", "environment": "math", "start": 0, "end": tasks, "num_repeats": 1}
    layout.materialize_report.write_text(json.dumps({"entries": [entry]}))
    cols = {k: [] for k in ("task_index", "started_at", "finished_at", "writer")}
    bench = layout.shard_benchmarks_dir("rollout")
    bench.mkdir(parents=True)
    clock = 0.0
    for i, attempts in enumerate(shards):
        for a, (startup, span) in enumerate(attempts):
            clock += startup
            writer = f"{i}-of-{n}_{1000 + a}-host-{100 + a}-1"
            writers = [writer] + [f"{writer}-r{p}" for p in range((passes or {}).get(i, 0))]
            for t in range(TASKS_PER_SHARD):
                cols["task_index"].append(i * TASKS_PER_SHARD + t)
                cols["started_at"].append(clock)
                cols["finished_at"].append(clock + span)
                cols["writer"].append(writers[t % len(writers)])
            clock += span
        last_startup, last_span = attempts[-1]
        (bench / f"{i}-of-{n}.tsv").write_text(f"s\th:m:s\n{last_startup + last_span}\t0\n")
    size = len(cols["writer"])
    table = pa.table(
        {
            **cols,
            "status": ["ok"] * size,
            "request_n": [1] * size,
            "latency_s": [1.0] * size,
            "completion_tokens": [10 + (t % 3) * 20 for t in cols["task_index"]],
            "reward": [0.0] * size,
        }
    )
    pq.write_table(table, layout.rollouts)
    layout.profile_tasks.parent.mkdir(parents=True)
    prof = {"label": ["a"] * tasks, "num_rollouts": [1] * tasks, "num_passed": [0] * tasks}
    pq.write_table(pa.table(prof), layout.profile_tasks)
    return root


def test_attempts_are_writer_ids_without_the_adaptive_pass_suffix():
    assert attempt_of("0-of-2_17-host-a-b-9-1-r3") == "0-of-2_17-host-a-b-9-1"
    assert attempt_of("0-of-2_17-host-9-1") == "0-of-2_17-host-9-1"


def test_a_resumed_pilot_is_detected_and_its_startup_taken_from_uninterrupted_jobs(tmp_path):
    clean = measure_pilot(_pilot_dir(tmp_path / "clean", [[(200.0, 50.0)], [(220.0, 60.0)]]))
    assert clean["startup_overhead_s"] == pytest.approx(210.0)
    assert (clean["jobs"], clean["attempts"], clean["warnings"]) == (2, 2, [])
    # shard 1 killed after 100 s of generation and resumed: the rerun started on a warm cache
    # (60 s) and finished the rest in 40 s; only that attempt is in the benchmark file
    resumed_dir = tmp_path / "resumed"
    resumed = measure_pilot(
        _pilot_dir(resumed_dir, [[(190.0, 50.0)], [(230.0, 100.0), (60.0, 40.0)]])
    )
    assert (resumed["jobs"], resumed["attempts"]) == (2, 3)
    assert resumed["interrupted_shards"] == ["1-of-2"]
    (warning,) = resumed["warnings"]
    assert "interrupted and resumed (1-of-2)" in warning and "uninterrupted" in warning
    assert resumed["startup_overhead_s"] == pytest.approx(190.0)
    assert abs(resumed["startup_overhead_s"] / clean["startup_overhead_s"] - 1) < 0.2
    # the warning reaches the output
    target = validate_config(
        {"entries": [{"label": "a", "environment": "math", "source": "x", "num_repeats": 4}]}
    )
    md = to_markdown(estimate(resumed, target, gpus=1, tasks={"a": 100}))
    assert md.count("**Warning**") == 1 and "1-of-2" in md


def test_bayes_first_round_job_is_its_own_job_not_an_attempt(tmp_path):
    """An uninterrupted bayes run: each shard's first-round job (writer ids ending in -first),
    earlier, then its rollout job: nothing was interrupted (it used to warn that every job was)."""
    root = _pilot_dir(tmp_path, [[(200.0, 50.0)], [(220.0, 60.0)]])
    path = RunLayout(root).rollouts
    rollouts = pq.read_table(path).to_pandas()
    first = rollouts.assign(writer=rollouts["writer"] + "-first")
    first[["started_at", "finished_at"]] -= 1000.0
    pq.write_table(pa.Table.from_pandas(pd.concat([first, rollouts]), preserve_index=False), path)
    pilot = measure_pilot(root)
    assert pilot["warnings"] == [] and pilot["interrupted_shards"] == []
    assert (pilot["jobs"], pilot["attempts"]) == (2, 2)
    assert pilot["startup_overhead_s"] == pytest.approx(210.0)


def test_every_job_resumed_uses_the_last_attempts_and_says_the_figure_is_low(tmp_path):
    pilot = measure_pilot(_pilot_dir(tmp_path, [[(200.0, 50.0), (70.0, 10.0)]]))
    assert pilot["startup_overhead_s"] == pytest.approx(70.0)
    (warning,) = pilot["warnings"]
    assert "every rollout job" in warning and "likely below" in warning


def test_adaptive_passes_of_one_job_are_one_attempt(tmp_path):
    pilot = measure_pilot(_pilot_dir(tmp_path, [[(200.0, 50.0)]], passes={0: 2}))
    assert (pilot["jobs"], pilot["attempts"], pilot["warnings"]) == (1, 1, [])
    assert pilot["startup_overhead_s"] == pytest.approx(200.0)


def test_gpu_hours_interval_holds_the_point_and_follows_cost_spread(tmp_path):
    pilot = measure_pilot(_pilot_dir(tmp_path, [[(200.0, 50.0)], [(220.0, 60.0)]]))
    target = validate_config(
        {"entries": [{"label": "a", "environment": "math", "source": "x", "num_repeats": 4}]}
    )
    res = estimate(pilot, target, gpus=1, tasks={"a": 1000})
    (row,) = res["labels"]
    # tasks cost 11, 31 or 51 tokens per rollout: which ones the pilot drew moves the mean
    assert row["gpu_hours_low"] < row["gpu_hours"] < row["gpu_hours_high"]
    assert row["gpu_hours_high"] < 2 * row["gpu_hours"]
    tot = res["total"]
    assert (tot["gpu_hours_low"], tot["gpu_hours_high"]) == (
        row["gpu_hours_low"],
        row["gpu_hours_high"],
    )


def test_a_partial_credit_label_settles_on_its_reward_variance():
    """Rewards 0 and 0.5 alternating, 8 per task: 0/1 passes call every task all-fail (exact
    would run it to K); by reward values each task shows two values with q = 1/2 each, so its
    first m rewards are all equal with probability 2 * 0.5^m = 0.5^(m - 1)."""
    rollouts = pd.DataFrame(
        {
            "task_index": np.repeat(np.arange(20), 8),
            "status": "ok",
            "reward": np.tile([0.0, 0.5], 80),
        }
    )
    per_task = value_counts_of(rollouts)
    assert per_task[0] == {0.0: 4, 0.5: 4} and len(per_task) == 20
    label = {"counts": [(8, 0)] * 20, "value_counts": per_task}
    counts = group_value_counts([label])
    assert counts.shape == (20, 2)
    # first round 2, then 2 at a time to 16: 2 + 2 * sum over m = 2, 4, ..., 14 of 0.5^(m - 1)
    by_hand = 2 + 2 * sum(0.5 ** (m - 1) for m in range(2, 16, 2))
    assert variance_rollouts(counts, 16, 2, 2) == pytest.approx(by_hand, rel=0.01)
    target = validate_config(
        {
            "adaptive": {"mode": "exact"},
            "entries": [{"label": "a", "environment": "math", "source": "x", "num_repeats": 16}],
        }
    )
    shares = adaptive_rollouts(target, None, 16, counts)
    assert shares["exact"] == pytest.approx(by_hand / 16, rel=0.01)
    # a 0/1 label has no value counts; mixed with one in a group it counts as {0: n-c, 1: c}
    binary = {"counts": [(8, 3)], "value_counts": None}
    assert group_value_counts([binary]) is None
    assert group_value_counts([label, binary])[-1].tolist() == [5, 0, 3]
    # a pass-rate band looks at more than the variance: no prediction, every task to K
    banded = target.model_copy(
        update={"export": target.export.model_copy(update={"min_pass_rate": 0.1})}
    )
    assert adaptive_rollouts(banded, None, 16, counts) == {"bayes": 1.0, "exact": 1.0}

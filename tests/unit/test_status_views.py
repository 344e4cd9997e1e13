"""`rewardprof status` and a job's progress line on run directories built by hand (the clock is
given, never waited for): elapsed time per state, an ETA that counts shards still to start, a
rate that survives a resume, the whole total before any output, and a finished adaptive run
shown as done."""

from __future__ import annotations

import io
import json
import re
import time

import pyarrow as pa
import pyarrow.parquet as pq

from rewardprof.stages.rollout.heartbeat import ShardHeartbeat
from rewardprof.stages.rollout.progress import Progress
from rewardprof.store.heartbeats import rates
from rewardprof.store.layout import RunLayout
from rewardprof.store.plans import PLAN_KEY
from rewardprof.store.schemas import ROLLOUT_SCHEMA, TASKS_SCHEMA
from rewardprof.tools.status import collect, format_status
from rewardprof.tools.status_eta import run_eta_s, startup_s, state_elapsed


def _tasks(layout: RunLayout, num_tasks: int, k: int) -> None:
    """The materialized table only: no shard file, no output yet."""
    cols = {name: [None] * num_tasks for name in TASKS_SCHEMA.names}
    cols.update(
        task_index=list(range(num_tasks)),
        task_id=[f"t{x}" for x in range(num_tasks)],
        label=["m"] * num_tasks,
        environment=["math"] * num_tasks,
        num_repeats=[k] * num_tasks,
    )
    layout.tasks.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pydict(cols, schema=TASKS_SCHEMA), layout.tasks)


def _beat(layout: RunLayout, i: int, n: int, **data) -> None:
    path = layout.shard_status(i, n)
    path.parent.mkdir(parents=True, exist_ok=True)
    base = {"shard": i, "num_shards": n, "host": "h", "pid": 100 + i, "interval_s": 10}
    path.write_text(json.dumps(base | data))


def test_total_is_known_from_the_plan_before_any_shard_file_or_output(tmp_path):
    layout = RunLayout(tmp_path / "results" / "r", 2)
    _tasks(layout, num_tasks=156, k=4)  # the 624 = 156 tasks x K=4
    (layout.root / "rollouts" / "status").mkdir(parents=True)
    st = collect(layout.root, num_shards=2)
    assert (st["done"], st["expected"]) == (0, 624)
    assert [s["expected"] for s in st["shards"]] == [312, 312]
    assert "0/624 rollouts" in format_status(st)


def test_elapsed_time_per_state():
    now = 10_000.0
    starting = {"state": "starting", "started_at": now - 75, "state_since": now - 75}
    running = {"state": "running", "started_at": now - 300, "state_since": now - 120}
    done = {"state": "done", "started_at": now - 900, "updated_at": now - 400}
    assert state_elapsed("starting", starting, now) == 75
    assert state_elapsed("running", running, now) == 120
    assert state_elapsed("done", done, now) == 500  # the job's whole time
    assert state_elapsed("pending", {}, now) is None


def test_eta_counts_the_shards_still_to_start(tmp_path):
    """One engine at a time (serve mode on one machine): shard 0 runs with 100 rollouts left
    at 2/s, shard 1 waits. Its engine load (measured on shard 0: 60 s) and its 312 rollouts
    come after: 50 + 60 + 156 = 266 s, where remaining / rate says 206 s."""
    now = 50_000.0
    shards = [
        {"state": "running", "done": 212, "expected": 312, "rollouts_per_s": 2.0, "elapsed_s": 106},
        {"state": "pending", "done": 0, "expected": 312, "rollouts_per_s": 0.0, "elapsed_s": None},
    ]
    beats = [{"started_at": now - 166, "generating_since": now - 106}]
    assert startup_s(beats) == 60
    eta = run_eta_s(shards, startup_s(beats), now)
    assert abs(eta - 266) < 1e-6
    # a shard still starting waits out the rest of the measured startup, in its own slot
    shards[1].update(state="starting", elapsed_s=45)
    assert abs(run_eta_s(shards, 60, now) - max(50, 15 + 156)) < 1e-6


def test_status_eta_on_a_run_directory_with_a_shard_to_start(tmp_path):
    layout = RunLayout(tmp_path / "results" / "r", 2)
    _tasks(layout, num_tasks=20, k=4)  # 40 rollouts per shard
    now = time.time()
    window = [[now - 20 + t, 10 + t, 100] for t in range(0, 21, 5)]  # 1 rollout/s
    _beat(
        layout,
        0,
        2,
        state="running",
        started_at=now - 50,
        state_since=now - 30,
        generating_since=now - 30,
        updated_at=now,
        generated=30,
        expected=40,
        window=window,
    )
    st = collect(layout.root, num_shards=2)
    # the journal is empty, so shard 0 has 40 left at 1/s (its window); then shard 1 pays the
    # startup measured on shard 0 (20 s) and runs its 40 at the same rate
    assert st["shards"][0]["elapsed_s"] >= 30
    assert abs(st["eta_s"] - (40 + 20 + 40)) < 2
    assert re.search(r"0-of-2\s+running\s+3\ds\s", format_status(st)), format_status(st)


def test_rate_survives_a_resume(tmp_path):
    """The killed attempt's heartbeat window carries over: the new attempt shows a rate
    before it generates anything (was 0.00 rollouts/s and ETA ?)."""
    layout = RunLayout(tmp_path / "results" / "r", 1)
    first = ShardHeartbeat(layout, 0, 1, interval_s=10)
    for collected in (0, 20, 40, 60):
        first.write(state="running", collected=collected)
    # same attempt, samples written in a burst: spread them 10 s apart as the clock would
    for j, sample in enumerate(first.data["window"]):
        sample[0] = 1_000.0 + 10 * j
    first.write()  # the file holds the window
    resumed = ShardHeartbeat(layout, 0, 1, interval_s=10)  # the next attempt (its own pid)
    resumed.data["pid"] = first.data["pid"] + 1
    resumed.write(state="starting")
    rate, _ = rates(resumed.data)
    assert abs(rate - 2.0) < 1e-9  # 60 rollouts over 30 s of the killed attempt
    # the gap between attempts is not generating time: the new attempt's samples join in
    resumed.data["window"].append([5_000.0, 60, resumed.data["pid"]])
    resumed.data["window"].append([5_010.0, 90, resumed.data["pid"]])
    assert abs(rates(resumed.data)[0] - 90 / 40) < 1e-9


def _shard_output(path, planned: list[int], stopped: list[bool]) -> None:
    body = {
        "task_index": list(range(len(planned))),
        "planned": planned,
        "stopped_early": stopped,
        "keep": [True] * len(planned),
    }
    schema = ROLLOUT_SCHEMA.with_metadata({PLAN_KEY: json.dumps(body).encode()})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(schema.empty_table(), path)


def test_finished_adaptive_run_reads_done_with_tasks_stopped_early(tmp_path):
    layout = RunLayout(tmp_path / "results" / "r", 1)
    _tasks(layout, num_tasks=4, k=8)
    _shard_output(layout.shard_rollouts(0, 1), planned=[4, 8, 4, 8], stopped=[1, 0, 1, 0])
    _beat(layout, 0, 1, state="done", started_at=1.0, updated_at=2.0)
    st = collect(layout.root, num_shards=1)
    assert st["shards"][0]["state"] == "done"
    assert (st["expected"], st["max_expected"], st["stopped_early"]) == (24, 32, 2)
    text = format_status(st)
    assert "done: 0/24 rollouts" in text and "32 at fixed K" in text
    assert "stopped early 2 tasks" in text


def test_job_progress_line_counts_what_earlier_attempts_journaled(tmp_path):
    """`[0-of-2: 240/312]` (the shard, as status says), not `0/72` (this attempt)."""
    layout = RunLayout(tmp_path / "results" / "r", 2)
    beat = ShardHeartbeat(layout, 0, 2, interval_s=10)
    beat.data.update(expected=312, journaled_ok=240)
    run_line, log = io.StringIO(), io.StringIO()
    progress = Progress(72, "0-of-2", 10, stream=log, heartbeat=beat, run_stream=run_line)
    progress.update(5, 0, 50)
    progress.tick()
    assert "[0-of-2: 245/312]" in run_line.getvalue()
    assert "[0-of-2] 5/72 rollouts, " in log.getvalue()  # this attempt's, then the shard's
    assert "(shard: 245/312)" in log.getvalue()
    assert json.loads(layout.shard_status(0, 2).read_text())["collected"] == 245

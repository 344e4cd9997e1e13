"""Heartbeats and `rewardprof status` on run directories built by hand: a job that went
silent is `lost`, one still loading its engine stays `starting`, and a heartbeat that cannot be
written never fails the job."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rewardprof.stages.rollout.heartbeat import ShardHeartbeat
from rewardprof.store.heartbeats import eta_text
from rewardprof.store.layout import RunLayout
from rewardprof.store.schemas import TASKS_SCHEMA
from rewardprof.tools.status import StatusError, collect, format_status


def _shards(layout: RunLayout, n: int, tasks_per_shard: int, k: int) -> None:
    for i in range(n):
        idx = [i + n * j for j in range(tasks_per_shard)]
        cols = {name: [None] * len(idx) for name in TASKS_SCHEMA.names}
        cols.update(
            task_index=idx,
            task_id=[f"t{x}" for x in idx],
            label=["m"] * len(idx),
            environment=["math"] * len(idx),
            num_repeats=[k] * len(idx),
        )
        path = layout.shard_tasks(i, n)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pydict(cols, schema=TASKS_SCHEMA), path)


def test_silent_job_is_lost_and_failed_job_shows_its_error(tmp_path):
    layout = RunLayout(tmp_path / "results" / "r", 3)
    _shards(layout, 3, tasks_per_shard=2, k=4)
    old = ShardHeartbeat(layout, 0, 3, interval_s=1)
    old.write(state="running", expected=8)
    stale = json.loads(layout.shard_status(0).read_text())
    stale["updated_at"] = time.time() - 3600  # SIGKILLed an hour ago
    layout.shard_status(0).write_text(json.dumps(stale))
    ShardHeartbeat(layout, 1, 3, interval_s=1).write(
        state="failed", error="EndpointDown: 1-of-3: engine endpoint:http://h/v1 unreachable"
    )
    st = collect(layout.root)
    assert [s["state"] for s in st["shards"]] == ["lost", "failed", "pending"]
    assert st["stopped"] == ["0-of-3", "1-of-3"] and st["expected"] == 24
    assert st["shards"][0]["error"].startswith("no heartbeat for 36")
    text = format_status(st)
    assert "1-of-3 (" in text and "EndpointDown: 1-of-3" in text


def test_heartbeat_stays_fresh_while_the_engine_starts(tmp_path):
    layout = RunLayout(tmp_path / "results" / "r", 1)
    beat = ShardHeartbeat(layout, 0, 1, interval_s=0.05)
    beat.write(state="starting")
    first = beat.data["updated_at"]
    thread = beat.beat_while_starting()
    deadline = time.monotonic() + 60
    while json.loads(layout.shard_status(0).read_text())["updated_at"] == first:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    beat.write(state="running")
    thread.join(60)
    assert not thread.is_alive()


def test_unwritable_heartbeat_never_fails_the_job(tmp_path, caplog):
    (tmp_path / "results").write_text("a file where the run directory should be")
    beat = ShardHeartbeat(RunLayout(tmp_path / "results" / "r", 1), 0, 1, interval_s=1)
    beat.write(state="running")
    beat.write(state="done")
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "heartbeat not written" in caplog.records[0].message


def test_status_of_a_directory_without_shards_says_so(tmp_path):
    with pytest.raises(StatusError, match="no such run directory"):
        collect(tmp_path / "nope")
    (tmp_path / "r").mkdir()
    with pytest.raises(StatusError, match="no shard files yet"):
        collect(tmp_path / "r")


def test_eta_text():
    assert [eta_text(0, 1), eta_text(5, 0), eta_text(90, 1), eta_text(7300, 1)] == [
        "0s",
        "?",
        "1m30s",
        "2h01m",
    ]
    # rounded up: 14 rollouts left at 14.2/s is "1s", never "0s" while work remains (a
    # fresh-clone CI run read "0s" for a run in progress)
    assert [eta_text(14, 14.17), eta_text(1, 1000.0), eta_text(61, 1)] == ["1s", "1s", "1m01s"]

"""Property tests (hypothesis) where the invariant is the point:

- shard partitioning: for every N, every task is in exactly one shard, by the rule, by Arrow's
  mask and in the shard stage's output;
- journal resolution: any interleaving of writes by several writers, kills (a torn last line,
  the writer abandoned), segment rolls and rereads resolves to one record per written pair,
  an ok record whenever the pair has one.

The adaptive planner's properties: tests/unit/decisions/test_plan_properties.py.

Derandomized (the same examples on every run, so CI is reproducible) and sized so the whole of
L0 stays within its time budget."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from harness.examples import derandomized
from hypothesis import given
from hypothesis import strategies as st

from rewardprof.stages import ShardPaths
from rewardprof.stages import shard as shard_stage
from rewardprof.store.collected import resolve
from rewardprof.store.journal import JournalWriter, scan_journal
from rewardprof.store.schemas import TASKS_SCHEMA
from rewardprof.store.shards import ShardPosition, shard_mask, shard_of

# ---- shard partitioning -------------------------------------------------------------------

task_indices = st.lists(st.integers(0, 10**12), min_size=1, max_size=200, unique=True)


@derandomized(100)
@given(indices=task_indices, num_shards=st.integers(1, 97))
def test_every_task_is_in_exactly_one_shard(indices, num_shards):
    array = pa.array(indices, pa.int64())
    masks = np.stack(
        [shard_mask(array, i, num_shards).to_numpy(zero_copy_only=False) for i in range(num_shards)]
    )
    assert (masks.sum(axis=0) == 1).all()  # one shard each, none left out
    owner = masks.argmax(axis=0)
    # the rule, on ints, numpy arrays and pandas Series alike, is the mask's
    assert [shard_of(t, num_shards) for t in indices] == owner.tolist()
    assert (shard_of(np.array(indices), num_shards) == owner).all()
    assert (shard_of(pd.Series(indices), num_shards).to_numpy() == owner).all()


def _tasks_table(indices: list[int]) -> pa.Table:
    n = len(indices)
    return pa.Table.from_pydict(
        {
            "task_index": indices,
            "task_id": [f"id{t}" for t in indices],
            "label": ["m"] * n,
            "environment": ["math"] * n,
            "num_repeats": [2] * n,
            "source_line": list(range(1, n + 1)),
            "messages": ["[]"] * n,
            "row": ["{}"] * n,
        },
        schema=TASKS_SCHEMA,
    )


@derandomized(25)
@given(num_tasks=st.integers(0, 60), num_shards=st.integers(1, 9))
def test_the_shard_stage_writes_a_partition(num_tasks, num_shards):
    with tempfile.TemporaryDirectory() as tmp:
        tasks = Path(tmp) / "tasks.parquet"
        pq.write_table(_tasks_table(list(range(num_tasks))), tasks)
        seen: list[int] = []
        for i in range(num_shards):
            out = Path(tmp) / f"{i}.parquet"
            paths = ShardPaths(tasks=tasks, out=out, shard=ShardPosition(i, num_shards))
            report = shard_stage.run(None, paths)
            got = pq.read_table(out).column("task_index").to_pylist()
            assert report["num_tasks"] == len(got)
            assert all(t % num_shards == i for t in got)
            seen += got
    assert sorted(seen) == list(range(num_tasks))  # every task once, over all shards


# ---- journal resolution -------------------------------------------------------------------

NUM_TASKS, K = 3, 3
TASKS = pd.DataFrame(
    {"task_index": range(NUM_TASKS), "task_id": [f"T{i}" for i in range(NUM_TASKS)]}
).assign(num_repeats=K)

write = st.tuples(
    st.just("write"),
    st.integers(0, 2),  # writer
    st.integers(0, NUM_TASKS - 1),
    st.integers(0, K - 1),
    st.sampled_from(["ok", "timeout", "engine_error"]),
)
events = st.lists(
    st.one_of(
        write,
        st.tuples(st.just("kill"), st.integers(0, 2)),
        st.tuples(st.just("roll"), st.integers(0, 2)),
        st.tuples(st.just("reread")),
    ),
    max_size=40,
)


def _record(task: int, rollout: int, status: str, t: float) -> dict:
    return {
        "task_index": task,
        "rollout_index": rollout,
        "task_id": f"T{task}",
        "status": status,
        "reward": 1.0 if status == "ok" else None,
        "gen_key": "g",
        "finished_at": t,
        "completion": "x",
    }


def _check_resolution(journal: Path, written: dict[tuple[int, int], set[str]]) -> None:
    winners = resolve(scan_journal(journal), TASKS, "g").winners
    pairs = list(zip(winners["task_index"], winners["rollout_index"], strict=True))
    assert len(pairs) == len(set(pairs))  # one record per pair
    assert set(pairs) == set(written)  # every written pair, nothing else (no torn line)
    for pair, status in zip(pairs, winners["status"], strict=True):
        assert status in written[pair]
        if "ok" in written[pair]:
            assert status == "ok"  # a failure never hides an ok record


@derandomized(40)
@given(events=events)
def test_any_interleaving_of_writes_kills_and_rereads_resolves_one_record_per_pair(events):
    with tempfile.TemporaryDirectory() as tmp:
        journal = Path(tmp)
        writers: dict[int, JournalWriter] = {}
        generation = dict.fromkeys(range(3), 0)  # a killed writer's job restarts under a new id
        written: dict[tuple[int, int], set[str]] = {}
        for step, event in enumerate(events):
            kind, *args = event
            if kind == "write":
                w, task, rollout, status = args
                if w not in writers:
                    writers[w] = JournalWriter(journal, f"w{w}g{generation[w]}", 3600, 4)
                writers[w].append(_record(task, rollout, status, float(step)))
                written.setdefault((task, rollout), set()).add(status)
            elif kind == "kill" and args[0] in writers:
                # SIGKILL mid-write: half a line in the tail, the writer never closed
                tail = writers.pop(args[0])._tail
                tail.write('{"task_index": 0, "rollout_index": 1, "task_id": "T')
                tail.flush()
                tail.close()
                generation[args[0]] += 1
            elif kind == "roll" and args[0] in writers:
                writers[args[0]].roll()
            elif kind == "reread":
                _check_resolution(journal, written)
        _check_resolution(journal, written)
        for w in writers.values():
            w.close()
        _check_resolution(journal, written)

"""Shards of one layout run at once over one journal directory: a scan must survive another
shard's live writer compacting (or closing) its tail between the listing and the read. Found by
tests/workflow/test_resilience.py: `FileNotFoundError: ...0-of-2_...000000.jsonl` in shard 1."""

from __future__ import annotations

from rewardprof.store import journal
from rewardprof.store.journal import JournalWriter, scan_journal


def _rec(ri: int) -> dict:
    return {
        "task_index": 0,
        "rollout_index": ri,
        "task_id": "A",
        "status": "ok",
        "reward": 1.0,
        "gen_key": "g",
        "finished_at": float(ri),
        "completion": "x",
    }


def test_scan_survives_a_tail_compacted_mid_scan(tmp_path, monkeypatch):
    other = JournalWriter(tmp_path, "0-of-2_1-host-1-0", interval_s=3600, max_records=1000)
    for r in range(3):
        other.append(_rec(r))
    real = journal._read_tail
    raced = []

    def racing(path, *args):
        if not raced:
            raced.append(path.name)
            other.roll()  # segment written, tail deleted: after the listing, before the read
        return real(path, *args)

    monkeypatch.setattr(journal, "_read_tail", racing)
    scan = scan_journal(tmp_path)
    assert raced == ["0-of-2_1-host-1-0.000000.jsonl"]
    assert sorted(scan.keys.column("rollout_index").to_pylist()) == [0, 1, 2]
    assert scan.bad_files == 0
    # the rows are readable through the segment that replaced the tail
    table = next(journal.read_rows(scan, {0: [0, 1, 2]}))
    assert table.column("completion").to_pylist() == ["x", "x", "x"]


def test_scan_survives_an_empty_tail_closed_mid_scan(tmp_path, monkeypatch):
    done = JournalWriter(tmp_path, "1-of-2_1-host-2-0", interval_s=3600, max_records=1000)
    done.append(_rec(0))
    done.close()  # a segment, no tail
    live = JournalWriter(tmp_path, "0-of-2_1-host-1-0", interval_s=3600, max_records=1000)
    real = journal._read_tail

    def racing(path, *args):
        live.close()  # nothing written: the empty tail is deleted
        return real(path, *args)

    monkeypatch.setattr(journal, "_read_tail", racing)
    scan = scan_journal(tmp_path)
    assert scan.keys.num_rows == 1


HOLDER = """
import multiprocessing, os, signal, sys, time
from pathlib import Path
from rewardprof.store.journal import ShardLock

lock = ShardLock(Path(sys.argv[1]), "0-of-1").__enter__()
ctx = multiprocessing.get_context("fork")
running = ctx.Event()


def work():
    running.set()  # the fork hooks have run in this child: it is a worker like any other
    time.sleep(120)


worker = ctx.Process(target=work)
worker.start()  # a verification worker, forked after the lock was taken
# kill only once the worker runs its task: a kill in the microseconds between fork and the
# child's at-fork hook is not what this test is about (on a loaded machine the parent could
# otherwise die before the child was first scheduled, with the lock's copy still open)
if not running.wait(60):
    sys.exit("the forked worker never started")
print(worker.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_shard_lock_dies_with_its_process_not_its_workers(tmp_path):
    """A rollout process in miniature takes the shard lock, forks a long-lived worker (as its
    verification pool does) and is SIGKILLed: the shard must be free at once."""
    import os
    import signal
    import subprocess
    import sys

    import psutil

    from rewardprof.store.journal import ShardLock

    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    worker_pid = int(holder.stdout.readline())
    assert holder.wait(60) == -signal.SIGKILL
    try:
        assert psutil.Process(worker_pid).status() != psutil.STATUS_ZOMBIE  # still running
        with ShardLock(tmp_path, "0-of-1"):  # ... and the shard is free at once
            pass
    finally:
        os.kill(worker_pid, signal.SIGKILL)


def test_rows_of_a_scanned_tail_stay_valid_while_it_grows_and_is_compacted(tmp_path):
    """A scan parses a tail's key columns only; read_rows re-reads the full records later.
    Between the two, the live writer appends (completing a torn line) and then compacts the
    tail into the segment of the same name: the scanned row numbers still name the same
    records."""
    live = JournalWriter(tmp_path, "0-of-2_1-host-1-0", interval_s=3600, max_records=1000)
    for r in range(3):
        live.append(dict(_rec(r), completion=f"c{r}"))
    tail = next(tmp_path.glob("*.jsonl"))
    with tail.open("a") as f:
        f.write('{"task_index": 0, "rollout_in')  # a torn line being written
    scan = scan_journal(tmp_path)
    assert scan.torn_lines == 1 and scan.keys.num_rows == 3
    assert scan.keys.column_names[:6] == [
        "task_index",
        "rollout_index",
        "task_id",
        "status",
        "gen_key",
        "finished_at",
    ]
    with tail.open("a") as f:
        f.write('dex": 9, "task_id": "A", "status": "ok", "completion": "late"}\n')
    first = next(journal.read_rows(scan, {0: [2, 1, 0]}))
    assert first.column("completion").to_pylist() == ["c2", "c1", "c0"]
    live.roll()  # compacted: the tail is gone, its segment holds the same rows in order
    assert not tail.exists()
    again = next(journal.read_rows(scan, {0: [0, 2]}))
    assert again.column("completion").to_pylist() == ["c0", "c2"]

from __future__ import annotations

import json

import pandas as pd
import pytest

from rewardprof.stages.rollout.shard_tasks import Unit, request_units
from rewardprof.store.collected import resolve
from rewardprof.store.journal import JournalWriter, ShardLock, scan_journal
from rewardprof.store.seeds import task_seed


def _rec(ti, ri, task_id="A", status="ok", t=1.0, key="g"):
    return {
        "task_index": ti,
        "rollout_index": ri,
        "task_id": task_id,
        "status": status,
        "reward": 1.0 if status == "ok" else None,
        "gen_key": key,
        "finished_at": t,
        "completion": "x" * 10,
    }


def test_segments_tail_and_torn_line(tmp_path):
    w = JournalWriter(tmp_path, "w1", interval_s=3600, max_records=3)
    for r in range(5):
        w.append(_rec(0, r))
    # 3 records rolled into a segment, 2 in the tail; simulate a kill mid-line
    w._tail.write('{"task_index": 0, "rollout_ind')
    w._tail.flush()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["w1.000000.parquet", "w1.000001.jsonl"]
    scan = scan_journal(tmp_path)
    assert scan.keys.num_rows == 5 and scan.torn_lines == 1
    assert sorted(scan.keys.column("rollout_index").to_pylist()) == [0, 1, 2, 3, 4]


def test_close_compacts_everything_into_segments(tmp_path):
    w = JournalWriter(tmp_path, "w1", interval_s=3600, max_records=100)
    for r in range(4):
        w.append(_rec(0, r))
    w.close()
    assert [p.suffix for p in tmp_path.iterdir()] == [".parquet"]
    assert scan_journal(tmp_path).keys.num_rows == 4


def test_resolve_dedupes_prefers_ok_rekeys_and_ignores_stale(tmp_path):
    w = JournalWriter(tmp_path, "w", interval_s=3600, max_records=100)
    w.append(_rec(0, 0, "A", "timeout", t=1))
    w.append(_rec(0, 0, "A", "ok", t=2))
    w.append(_rec(0, 0, "A", "engine_error", t=3))  # a later failure never hides an ok
    w.append(_rec(0, 1, "A", "ok", key="other"))  # another model/sampling: stale
    w.append(_rec(5, 0, "B", "ok"))  # task B moved from index 5 to 1
    w.append(_rec(0, 9, "A", "ok"))  # beyond num_repeats
    w.append(_rec(3, 0, "Z", "ok"))  # a task that no longer exists
    w._tail.flush()
    tasks = pd.DataFrame({"task_index": [0, 1], "task_id": ["A", "B"], "num_repeats": [2, 2]})
    col = resolve(scan_journal(tmp_path), tasks, "g")
    got = sorted(
        zip(
            col.winners["task_index"],
            col.winners["rollout_index"],
            col.winners["status"],
            strict=True,
        )
    )
    assert got == [(0, 0, "ok"), (1, 0, "ok")]
    assert col.stale == 1 and col.rekeyed == 1


def test_units_group_consecutive_indices_up_to_max_n():
    units = list(request_units([[0, 1, 2, 3], [1, 3, 4], []], max_n=3))
    assert [(u.pos, u.indices) for u in units] == [(0, [0, 1, 2]), (0, [3]), (1, [1]), (1, [3, 4])]
    assert isinstance(units[0], Unit)


def test_task_seed_is_stable_and_leaves_room_for_k():
    s = task_seed(0, "abc")
    assert s == task_seed(0, "abc") != task_seed(1, "abc")
    assert s % 4096 == 0 and 0 <= s <= 2**63 - 4096  # s + r: a signed 64-bit seed for vLLM


def test_resolve_counts_stale_records_per_gen_key(tmp_path):
    w = JournalWriter(tmp_path, "w", interval_s=3600, max_records=2)
    w.append(_rec(0, 0, "A", key="old"))
    w.append(_rec(0, 1, "A", key="old"))
    w.append(_rec(0, 0, "A", key="other"))
    w.append(_rec(0, 1, "A", key="g"))
    w.append(_rec(1, 0, "Z", key="old"))  # not one of these tasks: not counted
    w.close()
    tasks = pd.DataFrame({"task_index": [0], "task_id": ["A"], "num_repeats": [2]})
    col = resolve(scan_journal(tmp_path), tasks, "g")
    assert col.stale == 3
    assert col.winners["rollout_index"].tolist() == [1]


def test_segments_of_an_older_schema_read_with_new_columns_null(tmp_path):
    """A segment written before a column was added (completion_tokens_source) still reads:
    the new column comes back null."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rewardprof.store.journal import read_rows
    from rewardprof.store.schemas import COLUMN_NAMES, ROLLOUT_SCHEMA

    old = pa.schema([f for f in ROLLOUT_SCHEMA if f.name != "completion_tokens_source"])
    rec = dict(_rec(0, 0), completion_tokens=7)
    pq.write_table(pa.Table.from_pylist([rec], schema=old), tmp_path / "w.000000.parquet")
    (tmp_path / "w.000001.jsonl").write_text(json.dumps(_rec(0, 1)) + "\n")
    scan = scan_journal(tmp_path)
    tables = list(read_rows(scan, {0: [0], 1: [0]}))
    assert all(t.schema == ROLLOUT_SCHEMA and t.column_names == COLUMN_NAMES for t in tables)
    assert tables[0].column("completion_tokens").to_pylist() == [7]
    assert [t.column("completion_tokens_source").to_pylist() for t in tables] == [[None]] * 2


def test_shard_lock_is_exclusive(tmp_path):
    import pytest

    from rewardprof.store.journal import JournalLocked

    with (
        ShardLock(tmp_path, "0-of-2"),
        pytest.raises(JournalLocked, match="another rollout"),
        ShardLock(tmp_path, "0-of-2"),
    ):
        pass
    with ShardLock(tmp_path, "0-of-2"):  # released after the first holder exits
        pass


def test_winner_choice_matches_the_plain_definition_on_random_journals():
    """_winners' fast path (one-key sort, full ordering only for duplicated pairs) against the
    rule written out: sort by (pos, ri, ok first, latest first, scan order), take each pair's
    first record."""
    import numpy as np

    from rewardprof.store.collected import _winners

    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(0, 60))
        pos, ri = rng.integers(0, int(rng.integers(1, 6)), n), rng.integers(0, 4, n)
        ok = rng.random(n) < 0.5
        finished = rng.integers(0, 4, n).astype(float)  # ties are common
        finished[rng.random(n) < 0.1] = np.nan
        order = np.lexsort((-finished, ~ok, ri, pos))
        first = np.ones(n, dtype=bool)
        first[1:] = (pos[order][1:] != pos[order][:-1]) | (ri[order][1:] != ri[order][:-1])
        assert _winners(pos, ri, ok, finished).tolist() == order[first].tolist()


def test_writer_refuses_a_record_that_does_not_fit_the_schema(tmp_path):
    w = JournalWriter(tmp_path, "w1", interval_s=3600, max_records=100)
    w.append(_rec(0, 0))
    with pytest.raises(ValueError, match="completion is list, not a string"):
        w.append(dict(_rec(0, 1), completion=[{"type": "text", "text": "x"}]))
    w.close()  # the tail compacts: nothing unwritable reached it
    scan = scan_journal(tmp_path)
    assert scan.keys.num_rows == 1 and scan.quarantined == 0


def test_a_bad_last_line_without_newline_keeps_the_valid_records(tmp_path):
    """The fast path reads the complete lines; a last line that is a whole object but wrong
    (never ended by a newline) still quarantines the tail with every valid record kept."""
    tail = tmp_path / "w1.000000.jsonl"
    lines = [json.dumps(_rec(0, r)) + "\n" for r in range(3)]
    tail.write_text("".join(lines) + json.dumps(dict(_rec(0, 3), reward="high")))
    scan = scan_journal(tmp_path)
    assert scan.quarantined == 1
    assert sorted(scan.keys.column("rollout_index").to_pylist()) == [0, 1, 2]
    assert (tmp_path / "quarantine" / tail.name).exists()
    assert scan.sources == [tmp_path / "w1.000000.parquet"]


def test_a_tail_is_compacted_before_it_outgrows_its_reader(tmp_path, monkeypatch):
    """Segments are bounded in bytes, not only in records: no segment holds more than its
    reader can (Arrow: 2 GiB per column); here the bound is made small."""
    from rewardprof.store import journal as journal_module

    monkeypatch.setattr(journal_module, "SEGMENT_MAX_BYTES", 3000)
    w = JournalWriter(tmp_path, "w", interval_s=3600, max_records=10_000)
    for i in range(10):
        w.append(dict(_rec(0, i), completion="x" * 1000))
    w.close()
    segments = sorted(tmp_path.glob("*.parquet"))
    assert len(segments) >= 4  # about 2 records of ~1.2 kB per 3 kB segment
    import pyarrow.parquet as pq

    assert all(pq.read_metadata(p).num_rows <= 2 for p in segments)  # 3 would be over 3 kB
    assert scan_journal(tmp_path).keys.num_rows == 10
    with pytest.raises(ValueError, match="journal record of"):  # one record is bounded too
        monkeypatch.setattr(journal_module, "MAX_RECORD_BYTES", 500)
        JournalWriter(tmp_path, "v", 3600, 10).append(dict(_rec(1, 0), completion="y" * 600))


@pytest.mark.parametrize("damage", ["truncated", "garbage", "oversized"])
def test_a_segment_no_reader_can_use_is_quarantined_and_its_pairs_are_missing(
    tmp_path, monkeypatch, caplog, damage
):
    import logging

    from rewardprof.store import quarantine

    for writer, first in (("a", 0), ("b", 5)):
        w = JournalWriter(tmp_path, writer, interval_s=3600, max_records=100)
        for i in range(first, first + 5):
            w.append(_rec(i, 0))
        w.close()
    bad = tmp_path / "b.000000.parquet"
    if damage == "truncated":
        bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    elif damage == "garbage":
        bad.write_bytes(b"PAR1" + b"\xff" * 500 + b"PAR1")
    else:
        monkeypatch.setattr(
            quarantine, "READ_LIMIT_BYTES", (tmp_path / "a.000000.parquet").stat().st_size + 1
        )
        bad.write_bytes(bad.read_bytes() + b"\0" * 100)  # larger than any writer writes
    with caplog.at_level(logging.WARNING, logger="rewardprof.store.journal"):
        scan = scan_journal(tmp_path)
    assert sorted(scan.keys.column("task_index").to_pylist()) == [0, 1, 2, 3, 4]
    assert scan.quarantined == 1
    assert (tmp_path / "quarantine" / bad.name).exists() and not bad.exists()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and str(bad) in lines[0] and "generated again" in lines[0]
    assert scan_journal(tmp_path).quarantined == 0  # the next scan finds nothing wrong

"""The rollout store: append-only journals, independent of the shard layout.

Each rollout process is one writer. It appends every finished rollout to a JSONL tail (one line,
flushed), and every `segment_interval_s` compacts the tail into a Parquet segment and starts a
new tail. After a kill, the segments hold everything but the last seconds, and the tail holds
those (its torn last line is skipped). Finding what is collected reads only the segments' key
columns plus the short tails: completion text is never parsed to resume.

Files: `<writer>.<seq>.parquet` (segments) and `<writer>.<seq>.jsonl` (tails), where writer is
`<i>-of-<N>_<time>-<host>-<pid>-<n>` (store/shards.py `writer_prefix`). A crash between writing
a segment and deleting its tail leaves both; readers dedupe on (task_index, rollout_index).

Only records that fit ROLLOUT_SCHEMA are ever written (`JournalWriter.append` refuses others),
so a segment can always be compacted; no record is above MAX_RECORD_BYTES (store/record.py
bounds every text) and a tail is compacted once it holds `SEGMENT_MAX_BYTES`, so no segment or
tail is ever larger than its reader can hold (Arrow's 2 GiB per column and per JSON block).
A segment that does not read (truncated, garbage) or a file above READ_LIMIT_BYTES is
quarantined when scanned: moved to `quarantine/` with one line naming it; its rollouts are
missing, so they are generated again. A tail with a complete line that does not fit (written by
an older version, or damaged) is quarantined when it is scanned: its valid records become the
segment of the same name, the tail is moved to `quarantine/` with a warning naming it, and the
rollouts it held are generated again. A bad file never fails the next run.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from rewardprof.core.errors import RewardprofError
from rewardprof.core.limits import loads_bounded
from rewardprof.store.quarantine import (  # noqa: F401 (QUARANTINE: re-exported)
    QUARANTINE,
    quarantine_tail,
    quarantine_whole,
    unreadable,
)
from rewardprof.store.schemas import (
    COLUMN_NAMES,
    KEY_COLUMNS,
    ROLLOUT_SCHEMA,
    conform,
    record_problem,
)

log = logging.getLogger("rewardprof.store.journal")
SEGMENT_MAX_BYTES = 256 << 20  # JSON bytes of a tail before it is compacted
MAX_RECORD_BYTES = 64 << 20  # one record's JSON line; store/record.py keeps records far below


class JournalLocked(RewardprofError, RuntimeError):
    """Another rollout process holds this shard's lock."""


class ShardLock:
    """An exclusive flock per shard: two rollout processes never write the same shard.

    The lock dies with its process: forked children (verification workers) close their copy of
    the descriptor at fork, so a SIGKILLed rollout process frees its shard at once, not when its
    orphaned workers get around to exiting (a rerun right after a kill found it still locked).
    """

    def __init__(self, journal_dir: Path, shard_tag: str):
        journal_dir.mkdir(parents=True, exist_ok=True)
        self.path = journal_dir / f".lock-{shard_tag}"
        self._fd: int | None = None

    def __enter__(self) -> ShardLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise JournalLocked(
                f"{self.path}: another rollout process is running this shard; "
                f"wait for it or stop it first"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        _HELD_LOCKS.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _HELD_LOCKS.discard(self)
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


_HELD_LOCKS: set[ShardLock] = set()


def _drop_locks_in_child() -> None:
    for lock in list(_HELD_LOCKS):
        if lock._fd is not None:
            with contextlib.suppress(OSError):
                os.close(lock._fd)  # the child's copy only: the parent still holds the lock
            lock._fd = None
    _HELD_LOCKS.clear()


os.register_at_fork(after_in_child=_drop_locks_in_child)


class JournalWriter:
    def __init__(self, journal_dir: Path, writer_id: str, interval_s: float, max_records: int):
        self.dir = journal_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.writer_id = writer_id
        self.interval_s = interval_s
        self.max_records = max_records
        self.seq = 0
        self._buffer: list[dict[str, Any]] = []
        self._buffered_bytes = 0
        self._opened_at = time.monotonic()
        self._tail = self._open_tail()

    def _path(self, suffix: str) -> Path:
        return self.dir / f"{self.writer_id}.{self.seq:06d}.{suffix}"

    def _open_tail(self):
        self._opened_at = time.monotonic()
        return self._path("jsonl").open("a", encoding="utf-8")

    def append(self, record: dict[str, Any]) -> None:
        problem = record_problem(record)
        if problem is not None:  # a bug upstream; nothing is written, the journal stays sound
            raise ValueError(f"journal record does not fit the rollout schema: {problem}")
        line = json.dumps(record, ensure_ascii=False) + "\n"
        size = len(line.encode("utf-8"))
        if size > MAX_RECORD_BYTES:  # store/record.py bounds every text; a bug upstream
            raise ValueError(f"journal record of {size} bytes, over {MAX_RECORD_BYTES}")
        if self._buffered_bytes + size > SEGMENT_MAX_BYTES:
            self.roll()  # a segment never grows past what its reader can hold
        # One write of one complete line, then flush: a kill tears at most this line.
        self._tail.write(line)
        self._tail.flush()
        self._buffer.append(record)
        self._buffered_bytes += size
        if (
            len(self._buffer) >= self.max_records
            or time.monotonic() - self._opened_at >= self.interval_s
        ):
            self.roll()

    def roll(self) -> None:
        """Compact the current tail into a Parquet segment, then start a new tail."""
        if not self._buffer:
            return
        # column-wise: ~5x faster than from_pylist on 20k records of 23 fields
        table = pa.Table.from_pydict(
            {k: [r.get(k) for r in self._buffer] for k in COLUMN_NAMES}, schema=ROLLOUT_SCHEMA
        )
        final = self._path("parquet")
        tmp = final.with_name("." + final.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd")
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        tail_path = Path(self._tail.name)
        self._tail.close()
        tail_path.unlink(missing_ok=True)
        self._buffer = []
        self._buffered_bytes = 0
        self.seq += 1
        self._tail = self._open_tail()

    def close(self) -> None:
        self.roll()
        tail_path = Path(self._tail.name)
        self._tail.close()
        if tail_path.exists() and tail_path.stat().st_size == 0:
            tail_path.unlink()


@dataclass
class JournalScan:
    """Key columns of every journaled record, with where each row lives."""

    keys: pa.Table  # KEY_COLUMNS + _src (index into sources) + _row (row within source)
    sources: list[Path]  # a segment (.parquet) or a tail (.jsonl), re-read for full records
    torn_lines: int = 0
    bad_files: int = 0
    quarantined: int = 0  # tails moved aside by this scan (they did not fit the schema)


class _TailMismatch(ValueError):
    """A complete line of a tail does not fit ROLLOUT_SCHEMA."""

    def __init__(self, valid: pa.Table, bad: int, first: str):
        super().__init__(first)
        self.valid, self.bad, self.first_problem = valid, bad, first


def _read_tail(path: Path, columns: list[str] = COLUMN_NAMES) -> tuple[pa.Table, int]:
    """The tail's complete records (`columns` of them), and how many lines were torn.
    _TailMismatch when a complete line is a JSON object that does not fit the schema."""
    with path.open("rb") as f:
        data = f.read()
    schema = pa.schema([ROLLOUT_SCHEMA.field(c) for c in columns])
    # Fast path: Arrow's JSON reader over the complete lines (~10x json.loads per line; a
    # 20k-record tail is part of every resume), every column parsed, so a value of the wrong
    # type is found now and not when the records are read. Any bad line in there: the
    # line-by-line path (it keeps the same rows, so row numbers agree either way).
    cut = data.rfind(b"\n") + 1
    if cut:
        try:
            table = pa_json.read_json(
                pa.BufferReader(data[:cut]),
                read_options=pa_json.ReadOptions(block_size=max(1 << 20, cut)),
                parse_options=pa_json.ParseOptions(
                    explicit_schema=ROLLOUT_SCHEMA, unexpected_field_behavior="ignore"
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            pass
        else:
            try:  # the last line, without its newline: torn, or whole but never ended
                rest, torn = _read_lines(data[cut:].split(b"\n"))
            except _TailMismatch as exc:
                valid = pa.concat_tables([table, exc.valid])
                raise _TailMismatch(valid, exc.bad, exc.first_problem) from None
            if rest.num_rows:
                table = pa.concat_tables([table, rest])
            return table.select(columns).cast(schema), torn
    table, torn = _read_lines(data.split(b"\n"))
    return table.select(columns), torn


def _read_lines(lines: list[bytes]) -> tuple[pa.Table, int]:
    rows, torn, bad, first = [], 0, 0, ""
    for raw in lines:
        if not raw.strip():
            continue
        try:
            rec = loads_bounded(raw)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except ValueError:  # TooDeep is one
            torn += 1  # a torn last line after a kill is expected; anything else is counted
            continue
        problem = record_problem(rec)
        if problem is not None:
            bad += 1
            first = first or problem
            continue
        rows.append(rec)
    # column-wise (from_pylist is ~5x slower): a 20k-record tail is part of every resume
    cols = {k: [r.get(k) for r in rows] for k in COLUMN_NAMES}
    table = pa.Table.from_pydict(cols, schema=ROLLOUT_SCHEMA)
    if bad:
        raise _TailMismatch(table, bad, first)
    return table, torn


def journal_files(journal_dir: Path) -> Iterator[Path]:
    if not journal_dir.exists():
        return
    for p in sorted(journal_dir.iterdir()):
        if not p.name.startswith(".") and p.suffix in (".parquet", ".jsonl"):
            yield p


def _scan_file(path: Path) -> tuple[Path, pa.Table | None, int, bool] | None:
    """(where the records live, their key columns or None if unreadable, torn lines, whether
    the file was quarantined); None when the file is gone with nothing in its place."""
    quarantined = False
    if (why := unreadable(path)) is not None:
        quarantine_whole(path, why)
        return path, None, 0, True
    if path.suffix == ".jsonl":
        try:
            keys, torn = _read_tail(path, KEY_COLUMNS)
            return path, keys, torn, False
        except _TailMismatch as exc:
            path, quarantined = quarantine_tail(path, exc.valid, exc.bad, exc.first_problem), True
        except FileNotFoundError:
            # Another shard's live writer compacted this tail since the listing: it wrote the
            # segment of the same name first, then deleted the tail. (No tail of this shard's
            # own tasks can vanish: their writers are dead or hold our lock.)
            path = path.with_suffix(".parquet")
            if not path.exists():
                return None  # an empty tail, closed
    try:
        return path, pq.read_table(path, columns=KEY_COLUMNS), 0, quarantined
    except FileNotFoundError:
        return None  # quarantined by another shard's scan since the listing
    except Exception as exc:  # a segment is renamed into place whole; unreadable = damaged
        quarantine_whole(path, f"key columns do not read ({type(exc).__name__})")
        return path, None, 0, True


def scan_journal(journal_dir: Path) -> JournalScan:
    parts: list[pa.Table] = []
    sources: list[Path] = []
    torn = bad = quarantined = 0
    # Files are read by a few threads (Arrow releases the GIL): the journal directory is
    # shared by all shards, so a resuming shard reads every shard's key columns.
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        scanned = list(pool.map(_scan_file, journal_files(journal_dir)))
    for path, t, n_torn, moved in filter(None, scanned):
        quarantined += moved
        if t is None:
            bad += 1
            continue
        torn += n_torn
        src = len(sources)
        sources.append(path)
        parts.append(
            t.append_column("_src", pa.array(np.full(t.num_rows, src, np.int32))).append_column(
                "_row", pa.array(np.arange(t.num_rows, dtype=np.int64))
            )
        )
    if parts:
        keys = pa.concat_tables(parts)
    else:
        empty = ROLLOUT_SCHEMA.empty_table().select(KEY_COLUMNS)
        keys = empty.append_column("_src", pa.array([], pa.int32())).append_column(
            "_row", pa.array([], pa.int64())
        )
    return JournalScan(keys, sources, torn, bad, quarantined)


def _read_source(path: Path) -> pa.Table:
    """All columns of a segment or tail. Row numbers of a scan stay valid: a tail only grows
    at its end (its torn last line may since have been completed), and a tail compacted since
    the scan became the segment of the same name, holding the same records in the same order."""
    if path.suffix == ".jsonl":
        try:
            return _read_tail(path)[0]
        except FileNotFoundError:
            path = path.with_suffix(".parquet")
    return pq.read_table(path)


def read_rows(scan: JournalScan, picks: dict[int, list[int]]) -> Iterator[pa.Table]:
    """Full records for the chosen rows, one source at a time (bounded memory)."""
    for src, rows in sorted(picks.items()):
        table = conform(_read_source(scan.sources[src]))  # old segments lack new columns
        yield table.take(pa.array(rows, pa.int64()))

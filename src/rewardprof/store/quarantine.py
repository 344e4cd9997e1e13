"""Journal files no reader can use, moved aside (`<journal>/quarantine/`) with one line naming
each, so a bad file never fails the next run: its rollouts are missing and generated again.

A tail with lines that do not fit the rollout schema keeps its valid records as a segment
(`quarantine_tail`); a file that does not read at all, or is larger than READ_LIMIT_BYTES (no
writer of rewardprof.store.journal writes one: a reader would overflow Arrow's 2 GiB), is moved
whole (`quarantine_whole`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger("rewardprof.store.journal")
QUARANTINE = "quarantine"  # subdirectory for files that do not parse into the schema
READ_LIMIT_BYTES = 1 << 30  # a file above this was not written by this writer: quarantined


def quarantine_tail(path: Path, valid: pa.Table, bad: int, first_problem: str) -> Path:
    """Move a tail that does not fit the schema aside, its `valid` records kept as the segment
    of the same name (unless a compaction wrote that already); the segment's path."""
    segment = path.with_suffix(".parquet")
    if not segment.exists():
        tmp = segment.with_name(f".{segment.name}.{os.getpid()}.tmp")
        pq.write_table(valid, tmp, compression="zstd")
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, segment)
    target = path.parent / QUARANTINE / path.name
    target.parent.mkdir(exist_ok=True)
    with contextlib.suppress(FileNotFoundError):  # another scan moved it first
        os.replace(path, target)
        log.warning(
            "%s: %d records do not fit the rollout schema (first: %s); moved to %s, its %d "
            "valid records kept; the rollouts it held are generated again",
            path,
            bad,
            first_problem,
            target,
            valid.num_rows,
        )
    return segment


def quarantine_whole(path: Path, why: str) -> None:
    """Move a file no reader can use aside, with one line naming it and why."""
    target = path.parent / QUARANTINE / path.name
    target.parent.mkdir(exist_ok=True)
    with contextlib.suppress(FileNotFoundError):  # another scan moved it first
        os.replace(path, target)
        log.warning(
            "%s: %s; moved to %s; the rollouts it held are generated again", path, why, target
        )


def unreadable(path: Path) -> str | None:
    """Why a journal file cannot be read whole (too large, or not Parquet), else None."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return None
    if size > READ_LIMIT_BYTES:
        return f"{size} bytes, over the {READ_LIMIT_BYTES} a journal file may hold"
    if path.suffix != ".parquet":
        return None
    try:
        meta = pq.read_metadata(path)
    except FileNotFoundError:
        return None
    except Exception as exc:  # truncated, garbage: whatever Arrow says
        return f"not a readable Parquet file ({type(exc).__name__}: {str(exc)[:120]})"
    for g in range(meta.num_row_groups):
        if meta.row_group(g).total_byte_size > READ_LIMIT_BYTES:
            return f"row group {g} holds more than {READ_LIMIT_BYTES} bytes"
    return None

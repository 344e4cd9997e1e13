"""The shard's tasks table as the runner reads it: the small columns first, the text of the
tasks only when their requests are due (`TaskText`), which rollout indices are still missing,
and the requests they make."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def load_tasks(path: Path) -> pd.DataFrame:
    """The shard's tasks without their text (messages, row): see TaskText."""
    cols = ["task_index", "task_id", "label", "environment", "num_repeats"]
    return pq.read_table(path, columns=cols).to_pandas()


def read_text(path: Path, positions: list[int]) -> dict[int, tuple[str, str]]:
    """messages + row of the tasks at `positions` (row numbers in the file), reading only the
    row groups that hold them."""
    pf = pq.ParquetFile(path)
    wanted = np.unique(np.asarray(positions, dtype=np.int64))
    starts = np.cumsum([0] + [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)])
    out: dict[int, tuple[str, str]] = {}
    groups = np.unique(np.searchsorted(starts, wanted, side="right") - 1)
    for g in groups.tolist():
        lo, hi = int(starts[g]), int(starts[g + 1])
        local = wanted[(wanted >= lo) & (wanted < hi)]
        part = pf.read_row_group(g, columns=["messages", "row"]).take(pa.array(local - lo))
        msgs, rows = part.column("messages").to_pylist(), part.column("row").to_pylist()
        out.update(zip(local.tolist(), zip(msgs, rows, strict=True), strict=True))
    return out


class TaskText:
    """The text (messages JSON, row JSON) of the shard's tasks by position, read as the requests
    reach them: from the table's own columns, or from the tasks file one row group at a time, so
    the first request of a resumed shard does not wait for the text of every task still
    missing rollouts. `positions`: the tasks the work may ask rollouts of, in table order."""

    def __init__(self, tasks: pd.DataFrame, tasks_path: Path | None, positions: list[int]):
        self._tasks, self._path = tasks, tasks_path
        self._text: dict[int, tuple[str, str]] = {}
        self._batches = iter(self._row_group_batches(positions))

    def __getitem__(self, pos: int) -> tuple[str, str]:
        return self._text[pos]

    async def read(self, pos: int) -> None:
        """The text of the task at `pos`, read with its row group's batch when it is due."""
        while pos not in self._text:
            batch = next(self._batches, None)
            await asyncio.to_thread(self._load, [pos] if batch is None else batch)

    def _load(self, positions: list[int]) -> None:
        """messages + row JSON of the tasks at these positions (only those are read)."""
        need = [p for p in positions if p not in self._text]
        if not need:
            return
        if "messages" in self._tasks.columns and "row" in self._tasks.columns:
            msgs, rows = self._tasks["messages"], self._tasks["row"]
            self._text.update((p, (msgs.iat[p], rows.iat[p])) for p in need)
            return
        if self._path is None:
            raise ValueError("tasks without messages/row columns need tasks_path")
        self._text.update(read_text(self._path, need))

    def _row_group_batches(self, positions: list[int]) -> list[list[int]]:
        """`positions` split by the tasks file's row groups (one read each), in order."""
        if self._path is None or "messages" in self._tasks.columns:
            return [positions]
        meta = pq.ParquetFile(self._path).metadata
        ends = np.cumsum([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
        group = np.searchsorted(ends, np.asarray(positions, dtype=np.int64), side="right")
        cuts = np.flatnonzero(np.diff(group)) + 1
        return [part.tolist() for part in np.split(np.asarray(positions, dtype=np.int64), cuts)]


def missing_indices(
    tasks: pd.DataFrame, ok: pd.DataFrame, wanted: np.ndarray | None = None
) -> list[list[int]]:
    """Per task (in table order), the rollout indices < wanted (default: num_repeats) without
    an ok record."""
    repeats = tasks["num_repeats"].to_numpy(np.int64) if wanted is None else wanted
    if not len(repeats):
        return []
    width = int(repeats.max())
    pos = pd.Index(tasks["task_index"]).get_indexer(ok["task_index"])
    have = np.zeros((len(repeats), width + 1), dtype=bool)
    ri = ok["rollout_index"].to_numpy(np.int64)
    sel = (pos >= 0) & (ri < width)
    have[pos[sel], ri[sel]] = True
    need = (np.arange(width + 1) < repeats[:, None]) & ~have
    counts = need.sum(axis=1)
    missing: list[list[int]] = [[] for _ in range(len(repeats))]
    full = {k: list(range(k)) for k in np.unique(repeats).tolist()}
    for p in np.flatnonzero(counts).tolist():
        k = int(repeats[p])
        missing[p] = list(full[k]) if counts[p] == k else np.flatnonzero(need[p]).tolist()
    return missing


@dataclass
class Unit:
    """One request: `indices` are consecutive rollout indices of one task."""

    pos: int  # row of the task in the shard table
    indices: list[int]


def request_units(missing: list[list[int]], max_n: int) -> Iterator[Unit]:
    """The requests for the `missing` indices: runs of consecutive indices, at most max_n."""
    for pos, indices in enumerate(missing):
        run: list[int] = []
        for r in indices:
            if run and (r != run[-1] + 1 or len(run) >= max_n):
                yield Unit(pos, run)
                run = []
            run.append(r)
        if run:
            yield Unit(pos, run)

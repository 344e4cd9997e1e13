"""The shard's tasks table as the runner reads it: the small columns first, the text of the
tasks only when their requests are due, which rollout indices are still missing, and the
requests they make."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq


def load_tasks(path: Path) -> pd.DataFrame:
    """The shard's tasks without their text (messages, row): see runner.ShardRun.load_text."""
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

"""materialize: every manifest entry's source -> one tasks table (one row per task) + a report.

task_index is stamped by cumulative offsets in manifest order; task_id is a content hash of
(environment, the row's canonical JSON), which is what lets later stages re-key rollouts when
the table changes under them. Memory is O(limit) per entry (reservoir for `sample: random`,
streaming otherwise); both outputs appear atomically or not at all.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import pyarrow as pa
import pyarrow.parquet as pq

from rewardprof.core.atomic import atomic_path, write_json_atomic
from rewardprof.core.config import Config, Entry, GeneratorSource
from rewardprof.environments import RowError, make_environment
from rewardprof.sources.files import (
    ERRORS_SHOWN,
    RowErrors,
    SourceError,
    file_sha256,
    iter_rows,
    resolve_source,
    source_name,
)
from rewardprof.stages import MaterializePaths
from rewardprof.store.schemas import TASKS_SCHEMA

# Rows per Parquet row group. Large groups and pages let zstd see more text at once
# (1/19 -> 1/20+ of the reference's JSONL x 8 on synthetic rows; docs/benchmarks.md) while
# memory stays O(group), not O(source). Rows become Arrow arrays every _CHUNK rows, so only a
# few thousand rows are ever Python objects (holding a whole group as Python strings grew the
# peak RSS with the input size: freed string memory was not reused as well as Arrow's).
_GROUP = 16384
_CHUNK = 2048
_PAGE_BYTES = 8 << 20


def _canonical_json(row: dict[str, Any]) -> str:
    return json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def make_task_id(environment: str, row_json: str) -> str:
    return hashlib.sha256(f"{environment}\n{row_json}".encode()).hexdigest()[:32]


def _select(entry: Entry, rows: Iterator[tuple[int, dict]]) -> tuple[list | Iterator, dict]:
    """Apply limit/sample; returns (rows, stats). Streaming unless a reservoir is needed."""
    stats: dict[str, Any] = {"rows_read": 0}
    if entry.limit is None or entry.sample == "head":

        def head() -> Iterator[tuple[int, dict]]:
            for lineno, row in rows:
                if entry.limit is not None and stats["rows_read"] >= entry.limit:
                    return
                stats["rows_read"] += 1
                yield lineno, row

        return head(), stats
    # Algorithm R: a uniform sample of `limit` rows in one pass with O(limit) memory.
    rng = random.Random(entry.seed)
    reservoir: list[tuple[int, dict]] = []
    for n, item in enumerate(rows):
        stats["rows_read"] += 1
        if n < entry.limit:
            reservoir.append(item)
        else:
            j = rng.randint(0, n)
            if j < entry.limit:
                reservoir[j] = item
    reservoir.sort(key=lambda item: item[0])  # keep source order among the chosen rows
    return reservoir, stats


def _entry_batches(
    entry: Entry,
    start: int,
    base_dir: Path | None,
    errors: RowErrors,
    stats_out: dict[str, Any],
) -> Iterator[pa.RecordBatch]:
    """The entry's tasks; a bad row goes to `errors` and is left out (the run then fails
    with every bad row named, never with a partial table)."""
    env = make_environment(entry.environment, entry.options)
    selected, stats = _select(entry, iter_rows(entry, base_dir, errors))
    cols: dict[str, list] = {name: [] for name in TASKS_SCHEMA.names}
    index = start
    for lineno, row in selected:
        try:
            env.check_row(row)
            messages = env.prompt(row)
            if not any(str(m.get("content") or "").strip() for m in messages):
                raise RowError("empty prompt: every message's content is empty")
        except RowError as exc:
            errors.add(lineno, str(exc))
            continue
        row_json = _canonical_json(row)
        cols["task_index"].append(index)
        cols["task_id"].append(make_task_id(entry.environment, row_json))
        cols["label"].append(entry.label)
        cols["environment"].append(entry.environment)
        cols["num_repeats"].append(entry.num_repeats)
        cols["source_line"].append(lineno)
        cols["messages"].append(json.dumps(messages, ensure_ascii=False))
        cols["row"].append(row_json)
        index += 1
        if len(cols["task_index"]) >= _CHUNK:
            yield pa.RecordBatch.from_pydict(cols, schema=TASKS_SCHEMA)
            cols = {name: [] for name in TASKS_SCHEMA.names}
    if cols["task_index"]:
        yield pa.RecordBatch.from_pydict(cols, schema=TASKS_SCHEMA)
    stats_out.update(stats, rows_selected=index - start)


def _raise_bad_rows(bad: list[RowErrors]) -> None:
    """SourceError listing the bad rows of every source (the first few per source, each
    `file:line: reason`, then a count), if there are any."""
    total = sum(e.count for e in bad)
    if not total:
        return
    lines = [line for e in bad for line in e.report()]
    if total == 1:  # one bad row: its own line is the whole error
        raise SourceError(lines[0])
    sources = sum(1 for e in bad if e.count)
    raise SourceError(
        f"{total} bad rows in {sources} source(s); fix or remove them and rerun "
        f"(first {ERRORS_SHOWN} per source shown):\n" + "\n".join(lines)
    )


class EntryReport(TypedDict):
    label: str
    environment: str
    source: str
    source_sha256: str | None
    rows_read: int
    rows_selected: int
    sample: str
    limit: int | None
    seed: int | None
    num_repeats: int
    start: int
    end: int


class MaterializeReport(TypedDict):
    run: str
    entries: list[EntryReport]
    num_tasks: int
    num_rollouts_expected: NotRequired[int]


def _entry_report(
    entry: Entry, path: Path | None, stats: dict[str, Any], offset: int
) -> EntryReport:
    return {
        "label": entry.label,
        "environment": entry.environment,
        "source": source_name(entry),
        "source_sha256": file_sha256(path) if path else None,
        "rows_read": stats["rows_read"],
        "rows_selected": stats["rows_selected"],
        "sample": entry.sample,
        "limit": entry.limit,
        # the seed that shaped the selection: only a reservoir uses one
        "seed": entry.seed if (entry.sample == "random" and entry.limit) else None,
        "num_repeats": entry.num_repeats,
        "start": offset,
        "end": offset + stats["rows_selected"],
    }


def run(cfg: Config, paths: MaterializePaths) -> MaterializeReport:
    """Write the tasks table (paths.tasks) and the materialize report (paths.report, also
    returned); relative sources resolve under paths.base_dir (default: the working directory)."""
    base = paths.base_dir
    report: MaterializeReport = {"run": cfg.run, "entries": [], "num_tasks": 0}
    offset = 0
    bad: list[RowErrors] = []
    with atomic_path(paths.tasks) as tmp_tasks:
        writer = pq.ParquetWriter(
            tmp_tasks,
            TASKS_SCHEMA,
            compression="zstd",
            compression_level=3,
            data_page_size=_PAGE_BYTES,
        )
        try:
            for entry in cfg.entries:
                is_file = not isinstance(entry.source, GeneratorSource)
                path = resolve_source(entry, base) if is_file else None
                where = str(entry.source) if is_file else source_name(entry)
                stats: dict[str, Any] = {}
                chunks: list[pa.RecordBatch] = []
                errors = RowErrors(where)
                bad.append(errors)
                for batch in _entry_batches(entry, offset, base, errors, stats):
                    chunks.append(batch)
                    if sum(len(c) for c in chunks) >= _GROUP:
                        writer.write_table(pa.Table.from_batches(chunks), row_group_size=_GROUP)
                        chunks = []
                if chunks:
                    writer.write_table(pa.Table.from_batches(chunks), row_group_size=_GROUP)
                if stats["rows_selected"] == 0 and not errors.count:
                    raise SourceError(
                        f"{where}: entry {entry.label!r} has no rows "
                        f"(empty source); remove the entry or fix the source"
                    )
                report["entries"].append(_entry_report(entry, path, stats, offset))
                offset += stats["rows_selected"]
        finally:
            writer.close()
        _raise_bad_rows(bad)  # before the outputs appear: no table with rows left out
        report["num_tasks"] = offset
        report["num_rollouts_expected"] = sum(
            (e["end"] - e["start"]) * e["num_repeats"] for e in report["entries"]
        )
        write_json_atomic(paths.report, report)
    return report

"""Streaming readers for task sources: JSONL, Parquet, and procedural generators.

Each yields (line_number, row) one row at a time so materialize holds at most `limit` rows,
never the whole source. A bad row is reported to a `RowErrors` (its `path:line` and the reason;
the first few per file, then a count) and skipped, so one run names every bad row at once;
without one, the first bad row raises SourceError. A row may be at most MAX_ROW_BYTES long and
nest at most MAX_ROW_DEPTH deep (core/limits.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from rewardprof.core.config import Entry, GeneratorSource
from rewardprof.core.errors import RewardprofError
from rewardprof.core.limits import (
    MAX_ROW_BYTES,
    MAX_ROW_DEPTH,
    TooDeep,
    loads_bounded,
    structure_problem,
)
from rewardprof.sources.generators import generate_rows

ERRORS_SHOWN = 10  # bad rows named per file; the rest are counted


class SourceError(RewardprofError, ValueError):
    """A source that cannot be read; the message starts with `path:line:`."""


class RowErrors:
    """The bad rows of one source: the first `shown` as `path:line: reason`, then a count
    (`raise_first`: SourceError at the first instead)."""

    def __init__(self, where: str, shown: int = ERRORS_SHOWN, raise_first: bool = False):
        self.where, self.shown, self.raise_first = where, shown, raise_first
        self.lines: list[str] = []
        self.count = 0

    def add(self, lineno: int, reason: str) -> None:
        if self.raise_first:
            raise SourceError(f"{self.where}:{lineno}: {reason}")
        self.count += 1
        if len(self.lines) < self.shown:
            self.lines.append(f"{self.where}:{lineno}: {reason}")

    def report(self) -> list[str]:
        more = self.count - len(self.lines)
        return self.lines + ([f"{self.where}: ... and {more} more bad rows"] if more else [])


def source_name(entry: Entry) -> str:
    s = entry.source
    if isinstance(s, GeneratorSource):
        return f"{s.generator}:{s.task}?size={s.size}&seed={s.seed}"
    return s


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def iter_rows(
    entry: Entry, base_dir: Path | None = None, errors: RowErrors | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """The good rows of the entry's source; bad ones go to `errors` (None: raise at the
    first)."""
    src = entry.source
    if isinstance(src, GeneratorSource):
        yield from enumerate(generate_rows(src), start=1)
        return
    path = resolve_source(entry, base_dir)
    errors = errors if errors is not None else RowErrors(str(entry.source), raise_first=True)
    if path.suffix == ".parquet":
        yield from _iter_parquet(path)
    else:
        yield from _iter_jsonl(path, errors)


def resolve_source(entry: Entry, base_dir: Path | None = None) -> Path:
    assert isinstance(entry.source, str)
    path = Path(entry.source)
    if not path.is_absolute() and base_dir is not None:
        path = base_dir / path
    if not path.exists():
        raise SourceError(
            f"{entry.source}: source file of entry {entry.label!r} not found "
            f"(paths are relative to the working directory)"
        )
    if not path.is_file():
        raise SourceError(f"{entry.source}: source of entry {entry.label!r} is not a file")
    if path.suffix not in (".jsonl", ".json", ".parquet", ".ndjson"):
        raise SourceError(f"{entry.source}: unsupported source type; use .jsonl or .parquet")
    return path


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _iter_jsonl(path: Path, errors: RowErrors) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            if len(raw) > MAX_ROW_BYTES:
                errors.add(lineno, f"row of {len(raw)} bytes, over the {MAX_ROW_BYTES} limit")
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                errors.add(lineno, f"not valid UTF-8 ({exc.reason})")
                continue
            try:
                row = loads_bounded(text, parse_constant=_reject_constant)
            except TooDeep:
                errors.add(lineno, f"row nested deeper than {MAX_ROW_DEPTH} levels")
                continue
            except json.JSONDecodeError as exc:
                errors.add(lineno, f"malformed JSON ({exc.msg})")
                continue
            except ValueError as exc:  # NaN, Infinity: Python's extension, not JSON
                errors.add(lineno, f"malformed JSON ({exc})")
                continue
            if not isinstance(row, dict):
                errors.add(lineno, f"expected a JSON object, got {type(row).__name__}")
                continue
            problem = structure_problem(row, MAX_ROW_DEPTH)
            if problem:
                errors.add(lineno, f"row {problem}")
                continue
            yield lineno, row


def _iter_parquet(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a corrupt file
        raise SourceError(f"{path}: not a readable Parquet file ({exc})") from None
    lineno = 0
    for batch in pf.iter_batches(batch_size=4096):
        for row in batch.to_pylist():
            lineno += 1
            yield lineno, row

"""Streaming readers for task sources: JSONL, Parquet, and procedural generators.

Each yields (line_number, row) one row at a time so materialize holds at most `limit` rows,
never the whole source. A bad row raises SourceError naming `path:line` and the reason.
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
from rewardprof.sources.generators import generate_rows


class SourceError(RewardprofError, ValueError):
    """A source that cannot be read; the message starts with `path:line:`."""


def source_name(entry: Entry) -> str:
    s = entry.source
    if isinstance(s, GeneratorSource):
        return f"{s.generator}:{s.task}?size={s.size}&seed={s.seed}"
    return s


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def iter_rows(entry: Entry, base_dir: Path | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    src = entry.source
    if isinstance(src, GeneratorSource):
        yield from enumerate(generate_rows(src), start=1)
        return
    path = resolve_source(entry, base_dir)
    if path.suffix == ".parquet":
        yield from _iter_parquet(path)
    else:
        yield from _iter_jsonl(path)


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
    if path.suffix not in (".jsonl", ".json", ".parquet", ".ndjson"):
        raise SourceError(f"{entry.source}: unsupported source type; use .jsonl or .parquet")
    return path


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SourceError(f"{path}:{lineno}: not valid UTF-8 ({exc.reason})") from None
            try:
                row = json.loads(text)
            except json.JSONDecodeError as exc:
                raise SourceError(f"{path}:{lineno}: malformed JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise SourceError(
                    f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}"
                )
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

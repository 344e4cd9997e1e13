"""Checks of the entries' sources before any job runs: every file source is a file and not
empty (cheap: no row is read), every generator spec is one its library can build."""

from __future__ import annotations

from pathlib import Path

from rewardprof.core.config import Config, ConfigError, GeneratorSource
from rewardprof.sources.generators import check_generator


def check_sources(cfg: Config, base_dir: str | Path | None = None) -> None:
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    for i, entry in enumerate(cfg.entries):
        if isinstance(entry.source, GeneratorSource):
            check_generator(entry.source, f"entries[{i}].source")
            continue
        path = Path(entry.source)
        full = path if path.is_absolute() else base / path
        if not full.exists():
            raise ConfigError(
                f"entries[{i}].source: {entry.source}: file not found (relative "
                f"paths are relative to the working directory {base})"
            )
        if not full.is_file():
            raise ConfigError(
                f"entries[{i}].source: {entry.source}: is a directory, not a JSONL or Parquet file"
            )
        if full.stat().st_size == 0:
            raise ConfigError(
                f"entries[{i}].source: {entry.source}: file is empty; entry "
                f"{entry.label!r} would have no tasks"
            )

"""Snakemake's `--config` overrides as the strict config expects them (rules/common.smk)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def typed_overrides(config: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`config` with the sections given by Snakemake's `--config` read as YAML would read them.

    Snakemake types a top-level `--config key=value` (int, float, bool, then text), but parses a
    section (`--config 'sampling={max_tokens: 512}'`) with YAML's BaseLoader, which leaves every
    value inside a string. The config is strict (no string -> int), so those strings are read
    again as YAML; a value from a config file is never converted."""

    def retyped(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: retyped(v) for k, v in value.items()}
        if isinstance(value, list):
            return [retyped(v) for v in value]
        if isinstance(value, str):
            try:
                return yaml.safe_load(value) if value.strip() else value
            except yaml.YAMLError:
                return value
        return value

    def merged(base: dict[str, Any], over: dict[str, Any], top: bool) -> dict[str, Any]:
        out = dict(base)
        for key, value in over.items():
            if isinstance(value, dict) and isinstance(base.get(key), dict):
                out[key] = merged(base[key], value, top=False)
            elif isinstance(value, (dict, list)) or not top:
                out[key] = retyped(value)  # inside a section: BaseLoader's strings
            elif key in base:
                out[key] = base[key]
        return out

    return merged(config, overrides, top=True) if isinstance(config, dict) else config


# what a workflow target looks like and a config file does not: a path of a run directory, or a
# file type no config is written in
_TARGET_SUFFIXES = (".parquet", ".jsonl", ".csv", ".png", ".tsv", ".html", ".log")


def misplaced_target(configfiles: list[Path], cwd: Path) -> str | None:
    """One line when a word Snakemake read as a config file (`--configfile` takes every word
    after it) is a target: a file under `results/` or of a data type. Snakemake fails by itself
    (with a traceback, before any Snakefile runs) on a target that is missing or not text; this
    catches the ones that parse as YAML/JSON, e.g. `results/<run>/profile/summary.json`."""
    paths = [Path(p) for p in configfiles]
    for p in paths:
        rel = p.relative_to(cwd) if p.is_relative_to(cwd) else p
        # a YAML file is never a workflow output: one under results/ is a config written there
        # (`grpo-step --serve`'s refit.yaml)
        in_results = rel.parts[:1] == ("results",) and rel.suffix not in (".yaml", ".yml")
        if in_results or rel.suffix in _TARGET_SUFFIXES:
            configs = " ".join(
                str(q.relative_to(cwd) if q.is_relative_to(cwd) else q) for q in paths if q != p
            )
            return (
                f"{rel} came after --configfile, so Snakemake read it as a config file; "
                f"targets go before it: snakemake {rel} --configfile {configs or 'my-config.yaml'}"
                f" (or write --configfile=FILE, which takes one file)"
            )
    return None

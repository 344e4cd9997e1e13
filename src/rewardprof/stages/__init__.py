"""The workflow's stages, one module each, with one entry point each:

    run(cfg: Config | None, paths: StagePaths) -> StageReport

materialize -> shard -> rollout -> merge -> profile -> export -> report. `cfg` is the validated
config (None for the stages that need none: shard, merge, report); `paths` names the files and
directories the stage reads and writes; the returned report is JSON-able (the CLI logs it, and
most stages also write it to a file). No stage imports Snakemake: the rules call
`rewardprof <stage>`, which builds a StagePaths from its arguments and calls `run`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# What a stage's `run` returns: a JSON-able summary (counts, per-label tables, written files).
StageReport = dict[str, Any]


@dataclass(frozen=True)
class StagePaths:
    """The files and directories of one stage run; each stage reads the fields it needs."""

    tasks: Path | None = None  # tasks table (materialize writes it; later stages read it)
    report: Path | None = None  # own report (materialize, merge); materialize's (profile, export)
    out: Path | None = None  # the stage's output file or directory
    journal: Path | None = None  # rollout journal directory (shared by every shard)
    rollouts: Path | None = None  # merged rollouts dataset (rollouts.parquet/)
    profile: Path | None = None  # profile/tasks.parquet
    summary: Path | None = None  # profile/summary.json
    export_report: Path | None = None  # export/report.json (optional for report)
    shards: tuple[Path, ...] = ()  # the shard outputs, shard i at position i (merge)
    engine_log: Path | None = None  # where serve mode writes the server's log (rollout)
    base_dir: Path | None = None  # relative sources resolve here (default: the working dir)
    shard: int | None = None  # this shard's index (shard, rollout)
    num_shards: int | None = None  # the number of shards (shard, rollout)
    prior: Path | None = None  # adaptive/prior.json: the labels' fitted priors (bayes rollout)

    def need(self, name: str) -> Any:
        """The field `name`, which the calling stage cannot run without."""
        value = getattr(self, name)
        if value is None or value == ():
            raise TypeError(f"StagePaths.{name} is required by this stage")
        return value


# The path arguments of each stage command, all required: `--name` (dashes for
# underscores; the names are StagePaths' fields) and its help.
STAGE_PATH_ARGUMENTS: dict[str, dict[str, str]] = {
    "materialize": {
        "tasks": "the tasks table to write (Parquet)",
        "report": "the report to write (JSON)",
    },
    "shard": {
        "tasks": "the tasks table (materialize/tasks.parquet)",
        "out": "the shard's tasks to write (Parquet)",
    },
    "rollout": {
        "tasks": "the shard's tasks table",
        "journal": "journal directory (shared by all shards)",
        "out": "the shard's rollouts to write (Parquet)",
    },
    "prior": {
        "tasks": "the tasks table (all tasks)",
        "journal": "journal directory (every shard's first round)",
        "out": "adaptive/prior.json",
    },
    "audit": {
        "tasks": "the tasks table (all tasks)",
        "rollouts": "the merged rollouts (rollouts.parquet/)",
        "prior": "adaptive/prior.json",
        "out": "adaptive/audit.json",
    },
    "merge": {
        "tasks": "the tasks table (materialize/tasks.parquet)",
        "journal": "journal directory (for its notes)",
        "out": "the merged dataset to write (a directory)",
        "report": "the merge report to write (JSON)",
    },
    "profile": {
        "tasks": "the tasks table (materialize/tasks.parquet)",
        "rollouts": "the merged rollouts (rollouts.parquet/)",
        "report": "materialize report (index ranges)",
        "out": "profile output directory",
    },
    "export": {
        "profile": "profile/tasks.parquet",
        "report": "materialize/report.json (index ranges)",
        "out": "export directory",
    },
    "report": {
        "profile": "profile/tasks.parquet",
        "summary": "profile/summary.json",
        "out": "output directory",
    },
}


def add_path_arguments(p: argparse.ArgumentParser, command: str) -> None:
    """The required path arguments of stage command `command` (its STAGE_PATH_ARGUMENTS)."""
    for name, text in STAGE_PATH_ARGUMENTS[command].items():
        p.add_argument("--" + name.replace("_", "-"), required=True, help=text)

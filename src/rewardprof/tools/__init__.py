"""Commands around a run, not stages of it (check, status, estimate, launch, ...)."""

from __future__ import annotations

import argparse


def add_run_dir_arguments(p: argparse.ArgumentParser, num_shards_help: str) -> None:
    """The arguments of a command that reads a run directory: the directory, and which shard
    layout of it (a run may hold several: a reshard keeps the old layout's files)."""
    p.add_argument("run_dir", help="the run directory, results/<run>")
    p.add_argument("--num-shards", type=int, default=None, help=num_shards_help)

"""estimate: size a full sweep from a pilot run's per-rollout timings.

Measured from the pilot (results/<run>/), assuming the full sweep runs the same model, sampling
and engine on the same kind of hardware: the command reads the pilot's files and the target
config's sources and prints; the maths is in estimation/ (the pilot's measurements:
estimation/pilot.py; the useful fraction at K and adaptive sampling's rollouts:
estimation/signal.py and estimation/bootstrap.py; the sweep: estimation/sizing.py).

For the target config, each label's tasks are counted from its source (after `limit`), or given
with --tasks LABEL=N.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from rewardprof.core.config import Config, GeneratorSource
from rewardprof.estimation.pilot import PROFILE_COLUMNS, ROLLOUT_COLUMNS, pilot_measures
from rewardprof.estimation.sizing import size_sweep
from rewardprof.manifest.load import load_config
from rewardprof.sources.files import resolve_source
from rewardprof.store.layout import RunLayout
from rewardprof.store.shards import parse_shard_name
from rewardprof.tools.estimate_report import to_markdown


def _benchmark_seconds(tsv: Path) -> float | None:
    """A benchmark file's last row's seconds (the job's last attempt)."""
    with tsv.open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    return float(rows[-1]["s"]) if rows else None


def rollout_benchmarks(benchmark_dir: Path) -> list[tuple[str, tuple[int, int], float]]:
    """(name, shard (i, n), seconds) of each rollout job's benchmark file, in name order."""
    out = []
    for tsv in sorted(benchmark_dir.glob("*.tsv")):
        shard = parse_shard_name(tsv.name, "tsv")
        seconds = _benchmark_seconds(tsv) if shard is not None else None
        if shard is not None and seconds is not None:
            out.append((tsv.stem, shard, seconds))
    return out


def measure_pilot(
    run_dir: str | Path, gpus_per_engine: int = 1, cost_by: str = "tokens"
) -> dict[str, Any]:
    """The pilot's measurements (estimation/pilot.py) from its run directory."""
    layout = RunLayout(run_dir)
    report = json.loads(layout.materialize_report.read_text())
    rollouts = pq.read_table(layout.rollouts, columns=ROLLOUT_COLUMNS).to_pandas()
    prof = pq.read_table(layout.profile_tasks, columns=PROFILE_COLUMNS).to_pandas()
    benchmarks = rollout_benchmarks(layout.shard_benchmarks_dir("rollout"))
    return pilot_measures(
        str(layout.root), report, rollouts, prof, benchmarks, gpus_per_engine, cost_by
    )


def count_tasks(
    cfg: Config, base_dir: Path | None = None, skip: set[str] | None = None
) -> dict[str, int]:
    """Tasks per entry of a config, without materializing (line / row counts, then limit)."""
    out = {}
    for e in cfg.entries:
        if e.label in (skip or ()):
            continue
        if isinstance(e.source, GeneratorSource):
            n = e.source.size
        else:
            path = resolve_source(e, base_dir)
            if path.suffix == ".parquet":
                n = pq.ParquetFile(path).metadata.num_rows
            else:
                with path.open("rb") as f:
                    n = sum(1 for line in f if line.strip())
        out[e.label] = min(n, e.limit) if e.limit else n
    return out


def estimate(
    pilot: dict[str, Any],
    target: Config,
    gpus: int,
    gpus_per_engine: int = 1,
    tasks: dict[str, int] | None = None,
    base_dir: Path | None = None,
) -> dict[str, Any]:
    given = dict(tasks or {})
    unknown = set(given) - {e.label for e in target.entries}
    if unknown:
        raise ValueError(f"--tasks: unknown label(s) {', '.join(sorted(unknown))}")
    n_tasks = {**count_tasks(target, base_dir, skip=set(given)), **given}
    return size_sweep(pilot, target, n_tasks, gpus, gpus_per_engine)


def run_command(args: argparse.Namespace) -> int:
    """`rewardprof estimate`: print the estimate (markdown); with --out also write it."""
    target = load_config(args.target_config)
    tasks = {}
    for item in args.tasks or []:
        label, _, n = item.partition("=")
        tasks[label] = int(n)
    pilot = measure_pilot(args.run_dir, args.gpus_per_engine, args.cost_by)
    res = estimate(
        pilot,
        target,
        args.gpus,
        args.gpus_per_engine,
        tasks or None,
        Path(args.base_dir) if args.base_dir else None,
    )
    md = to_markdown(res)
    for warning in pilot["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    print(md)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "estimate.md").write_text(md)
        (out / "estimate.json").write_text(json.dumps(res, indent=2) + "\n")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of `rewardprof estimate` (the command table is in rewardprof.cli)."""
    p.add_argument("run_dir", help="the pilot's results/<run>")
    p.add_argument("--target-config", required=True, help="the full sweep's config")
    p.add_argument("--gpus", type=int, default=8, help="GPUs of the full sweep (default 8)")
    p.add_argument(
        "--gpus-per-engine",
        type=int,
        default=1,
        help="GPUs per vLLM engine, pilot and sweep alike (default 1)",
    )
    p.add_argument(
        "--tasks",
        action="append",
        metavar="LABEL=N",
        help="task count of a label instead of counting its source (repeatable)",
    )
    p.add_argument(
        "--cost-by",
        choices=["tokens", "latency"],
        default="tokens",
        help="split the pilot's GPU-hours over labels by output tokens (default) or "
        "by engine latency per sample",
    )
    p.add_argument("--base-dir", default=None, help="relative sources resolve here (default .)")
    p.add_argument("--out", default=None, help="also write estimate.md + estimate.json here")

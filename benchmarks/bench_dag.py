"""DAG: `snakemake -n` of the real Snakefile with 1,024 shards.

    python benchmarks/bench_dag.py            # 1,024 shards
    python benchmarks/bench_dag.py --small    # smoke size (8 shards)

A fresh working directory with a three-entry config (math, code, instruction following) and
`num_shards: 1024`; the dry run must list every shard's shard and rollout job. Reported: wall
time of the whole `snakemake -n` command (median of --repeat runs) and its peak RSS.
Target: <= 15 s. Note: with the Slurm executor plugin installed, every snakemake start queries
Slurm (`scontrol show config`); if a Slurm client is installed but no controller answers, that
alone costs ~10 s (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import default_out, run_measured, write_sources  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="smoke size (8 shards, 1 run)")
    p.add_argument("--shards", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    if args.small:
        args.shards, args.repeat = 8, 1
    work = default_out(f"dag_{args.shards}")
    shutil.rmtree(work, ignore_errors=True)
    entries = write_sources(work / "data", 200_000)
    for e in entries:
        e["source"] = os.path.relpath(e["source"], work)
    cfg = {"run": "dag", "num_shards": args.shards, "entries": entries}
    (work / "config.yaml").write_text(yaml.safe_dump(cfg))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    cmd = [
        str(Path(sys.executable).with_name("snakemake")),
        "-n",
        "-s",
        str(REPO / "Snakefile"),
        "-d",
        str(work),
        "--configfile",
        str(work / "config.yaml"),
        "--cores",
        "2",
    ]
    walls, cpus, rss, jobs = [], [], [], 0
    for _ in range(args.repeat):
        code, wall, rss_mb, cpu_s, out = run_measured(cmd, env=env, cwd=work)
        walls.append(wall)
        rss.append(rss_mb)
        cpus.append(cpu_s)
        if code != 0:
            raise SystemExit(f"snakemake -n failed:\n{out[-3000:]}")
        rollouts = re.search(r"^rollout\s+(\d+)", out, re.M)
        jobs = int(rollouts.group(1)) if rollouts else 0
        if jobs != args.shards:
            raise SystemExit(f"expected {args.shards} rollout jobs in the dry run, got {jobs}")
    shutil.rmtree(work, ignore_errors=True)
    print(
        f"dag: snakemake -n with {args.shards} shards: {statistics.median(walls):.1f} s "
        f"(median of {args.repeat}; min {min(walls):.1f}, max {max(walls):.1f}), "
        f"{jobs} rollout jobs listed, CPU {statistics.median(cpus):.1f} s, peak RSS "
        f"{max(rss):.0f} MB [target <= 15 s]",
        flush=True,
    )


if __name__ == "__main__":
    main()

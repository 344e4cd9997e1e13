"""Materialize: size on disk vs the reference's JSONL x K, source MB/s, peak RSS at 1x and 4x.

    python benchmarks/bench_materialize.py            # 1x = 256 MB of sources, 4x = 1 GB
    python benchmarks/bench_materialize.py --small    # smoke size

Runs `rewardprof materialize` (the command the workflow runs) as a child process per input
size and reads its peak RSS (synth.run_measured). Targets: tasks.parquet <= 1/20 of the
same tasks as JSONL rows repeated K=8 times; the 4x run's peak RSS <= 1.2x the 1x run's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import default_out, run_measured, write_sources  # noqa: E402

K = 8


def run_materialize(src_dir: Path, mb: float, out: Path) -> dict:
    entries = write_sources(src_dir, int(mb * 1e6))
    cfg = {"run": "bench", "num_shards": 1, "entries": [dict(e, num_repeats=K) for e in entries]}
    cfg_path = out / f"config-{src_dir.name}.json"
    cfg_path.write_text(json.dumps(cfg))
    source_bytes = sum(Path(e["source"]).stat().st_size for e in entries)
    tasks, report = out / f"tasks-{src_dir.name}.parquet", out / f"report-{src_dir.name}.json"
    exe = Path(sys.executable).with_name("rewardprof")
    code, wall, rss_mb, cpu_s, err = run_measured(
        [
            str(exe),
            "materialize",
            "--config",
            str(cfg_path),
            "--tasks",
            str(tasks),
            "--report",
            str(report),
        ]
    )
    if code != 0:
        raise SystemExit(f"materialize failed:\n{err}")
    rep = json.loads(report.read_text())
    return {
        "source_bytes": source_bytes,
        "jsonl_x8_bytes": source_bytes * K,
        "tasks_bytes": tasks.stat().st_size,
        "wall_s": wall,
        "rss_mb": rss_mb,
        "tasks": rep["num_tasks"],
        "cpu_s": cpu_s,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="smoke size (1 MB / 4 MB)")
    p.add_argument("--mb", type=float, default=256.0, help="size of the 1x sources, MB")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--keep", action="store_true", help="keep the generated files")
    args = p.parse_args()
    mb = 1.0 if args.small else args.mb
    out = args.out or default_out("materialize")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        one = run_materialize(out / "src1x", mb, out)
        four = run_materialize(out / "src4x", 4 * mb, out)
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)
    ratio = four["jsonl_x8_bytes"] / four["tasks_bytes"]
    mbps = four["source_bytes"] / 1e6 / four["wall_s"]
    flat = four["rss_mb"] / one["rss_mb"]
    print(
        f"materialize: size 1/{ratio:.1f} of JSONL x{K} "
        f"({four['tasks_bytes'] / 1e6:.1f} MB vs {four['jsonl_x8_bytes'] / 1e6:.0f} MB, "
        f"{four['tasks']} tasks) [target <= 1/20]; {mbps:.1f} source MB/s "
        f"({four['source_bytes'] / 1e6:.0f} MB in {four['wall_s']:.1f} s, "
        f"{four['source_bytes'] / 1e6 / four['cpu_s']:.1f} MB per CPU-second); peak RSS "
        f"1x {one['rss_mb']:.0f} MB, 4x {four['rss_mb']:.0f} MB = {flat:.2f}x "
        f"[target <= 1.2x]",
        flush=True,
    )


if __name__ == "__main__":
    main()

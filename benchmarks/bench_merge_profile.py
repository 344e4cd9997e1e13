"""Merge + profile at sweep scale: 726,121 tasks x K=8 = 5.8M rollouts in 16 shard files.

    python benchmarks/bench_merge_profile.py            # generates ~5 GB once, then measures
    python benchmarks/bench_merge_profile.py --small    # smoke size

Generates a tasks table (realistic 1-2 kB rows), its materialize report, 16 shard outputs with
0.5-8 kB completions, and the shared journal holding the same records as 20k-record segments
(key columns real, completion text a stand-in unless --journal-text: merge reads only the
journal's key columns). Then runs `rewardprof merge` and `rewardprof profile` exactly as the
workflow's rules do, each as a child process, and reads each one's peak RSS
(synth.run_measured).
Targets: merge + profile <= 120 s wall, <= 8 GB peak RSS; profile written as Parquet + JSONL.
The generated data is kept under the output directory for reruns (--clean deletes it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import (  # noqa: E402
    Text,
    default_out,
    rollout_batch,
    run_measured,  # noqa: E402  # noqa: E402
    tasks_table,
    write_parquet,
)

GEN_KEY = "0123456789abcdef"


def prepare(out: Path, num_tasks: int, repeats: int, num_shards: int, journal_text: bool) -> None:
    marker = out / "READY.json"
    spec = {
        "tasks": num_tasks,
        "repeats": repeats,
        "shards": num_shards,
        "journal_text": journal_text,
    }
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return
    shutil.rmtree(out, ignore_errors=True)
    (out / "shards").mkdir(parents=True)
    (out / "journal").mkdir()
    t0 = time.monotonic()
    table, report = tasks_table(num_tasks, repeats)
    write_parquet(table, out / "tasks.parquet")
    (out / "report.json").write_text(json.dumps(report))
    task_ids = table.column("task_id").to_numpy(zero_copy_only=False)
    labels = table.column("label").to_numpy(zero_copy_only=False)
    del table
    text = Text(1)
    rng = np.random.default_rng(1)
    from rewardprof.store.schemas import ROLLOUT_SCHEMA

    seg = 0
    per_batch = 8192 // repeats
    for i in range(num_shards):
        idx = np.arange(i, num_tasks, num_shards)
        with pa.parquet.ParquetWriter(
            out / "shards" / f"{i}-of-{num_shards}.parquet", ROLLOUT_SCHEMA, compression="zstd"
        ) as w:
            for b in range(0, len(idx), per_batch):
                ti = np.repeat(idx[b : b + per_batch], repeats)
                ri = np.tile(np.arange(repeats), len(ti) // repeats)
                args = (ti, ri, task_ids[ti].tolist(), labels[ti].tolist(), GEN_KEY)
                w.write_batch(rollout_batch(*args, text, rng))
                # the journal segment of the same records (one per ~20k in a real run)
                jb = rollout_batch(*args, text if journal_text else None, rng)
                if b % (per_batch * 2) == 0:
                    jw = pa.parquet.ParquetWriter(
                        out / "journal" / f"s{i}of{num_shards}-1-host-1.{seg:06d}.parquet",
                        ROLLOUT_SCHEMA,
                        compression="zstd",
                    )
                    seg += 1
                jw.write_batch(jb)
                if b % (per_batch * 2) != 0 or b + per_batch >= len(idx):
                    jw.close()
        print(
            f"  shard {i}: {len(idx) * repeats} rollouts ({time.monotonic() - t0:.0f} s)",
            file=sys.stderr,
            flush=True,
        )
    marker.write_text(json.dumps(spec))


def run(cmd: list[str]) -> tuple[float, float, float]:
    code, wall, rss_mb, cpu_s, out = run_measured(cmd)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd[:2])} failed:\n{out[-3000:]}")
    return wall, rss_mb, cpu_s


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="smoke size (3,000 tasks, 4 shards)")
    p.add_argument("--tasks", type=int, default=726_121)
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument(
        "--journal-text",
        action="store_true",
        help="journal segments carry real completion text too (2x the disk)",
    )
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--clean", action="store_true", help="delete the generated data after")
    p.add_argument("--prepare-only", action="store_true")
    args = p.parse_args()
    if args.small:
        args.tasks, args.shards = 3000, 4
    out = args.out or default_out("merge_profile" + ("_small" if args.small else ""))
    if args.prepare_only:
        t0 = time.monotonic()
        prepare(out / "data", args.tasks, args.repeats, args.shards, args.journal_text)
        print(f"prepared in {time.monotonic() - t0:.0f} s", file=sys.stderr)
        return
    # Generate in a child: Linux counts the RSS a child inherits at fork in its ru_maxrss, so
    # a measuring process grown by generating GBs reports its own size for merge and profile.
    subprocess.run(
        [
            sys.executable,
            __file__,
            "--prepare-only",
            "--out",
            str(out),
            "--tasks",
            str(args.tasks),
            "--repeats",
            str(args.repeats),
            "--shards",
            str(args.shards),
            *(["--journal-text"] * args.journal_text),
        ],
        check=True,
    )
    d, res = out / "data", out / "result"
    shutil.rmtree(res, ignore_errors=True)
    res.mkdir(parents=True)
    report = json.loads((d / "report.json").read_text())
    cfg = {
        "run": "bench",
        "num_shards": args.shards,
        "entries": [
            {
                "label": e["label"],
                "environment": e["environment"],
                "source": f"{e['label']}.jsonl",
                "num_repeats": args.repeats,
            }
            for e in report["entries"]
        ],
        "profile": {"pass_at_k": [1, 2, 4, 8], "group_size": 8},
    }
    exe = str(Path(sys.executable).with_name("rewardprof"))
    shards = [str(d / "shards" / f"{i}-of-{args.shards}.parquet") for i in range(args.shards)]
    merge_s, merge_rss, merge_cpu = run(
        [
            exe,
            "merge",
            "--tasks",
            str(d / "tasks.parquet"),
            "--journal",
            str(d / "journal"),
            "--out",
            str(res / "rollouts.parquet"),
            "--report",
            str(res / "merge_report.json"),
            *shards,
        ]
    )
    prof_s, prof_rss, prof_cpu = run(
        [
            exe,
            "profile",
            "--config-json",
            json.dumps(cfg),
            "--tasks",
            str(d / "tasks.parquet"),
            "--rollouts",
            str(res / "rollouts.parquet"),
            "--report",
            str(d / "report.json"),
            "--out",
            str(res / "profile"),
        ]
    )
    n_rollouts = json.loads((res / "merge_report.json").read_text())["num_rollouts"]
    jsonl_lines = sum(1 for _ in (res / "profile" / "tasks.jsonl").open("rb"))
    assert jsonl_lines == args.tasks and (res / "profile" / "tasks.parquet").exists()
    shutil.rmtree(res, ignore_errors=True)
    if args.clean:
        shutil.rmtree(out, ignore_errors=True)
    total, rss = merge_s + prof_s, max(merge_rss, prof_rss)
    print(
        f"merge+profile: {n_rollouts} rollouts of {args.tasks} tasks in {total:.1f} s "
        f"(merge {merge_s:.1f} s, profile {prof_s:.1f} s; CPU {merge_cpu + prof_cpu:.1f} s) "
        f"[target <= 120 s]; peak RSS "
        f"{rss / 1024:.2f} GB (merge {merge_rss / 1024:.2f}, profile {prof_rss / 1024:.2f}) "
        f"[target <= 8 GB]",
        flush=True,
    )


if __name__ == "__main__":
    main()

"""Client overhead: rollouts/s of the rollout pipeline against a zero-latency server.

    python benchmarks/bench_client.py                 # trivial verifier on one core + math
    python benchmarks/bench_client.py --mode trivial  # only the one-core figure
    python benchmarks/bench_client.py --small         # smoke size

The server (benchmarks/fast_server.py: raw asyncio, pre-rendered 0.5-8 kB completions) runs in
its own process pinned to CPU 1; this process pins itself to CPU 0 and runs the real pipeline
(`ShardRun.generate`: bounded worker pool, n=K grouped requests, retries/typing in the client,
verification, durable journal appends and Parquet segments) over tasks with 1-2 kB prompts.
Trivial verifier: a `bench_trivial` environment whose verify is a substring test. Math: the
real math environment (math-verify in pebble worker processes), with --math-workers workers and
this process unpinned; reported per worker process. Targets: trivial >= 2,000 rollouts/s.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import default_out, tasks_table, trivial_environment  # noqa: E402

from rewardprof.engine.session import Endpoint  # noqa: E402
from rewardprof.manifest.load import validate_config  # noqa: E402
from rewardprof.stages.rollout.progress import Progress  # noqa: E402
from rewardprof.stages.rollout.rounds import ShardJournal  # noqa: E402
from rewardprof.stages.rollout.runner import ShardRun  # noqa: E402
from rewardprof.stages.rollout.work import FixedWork  # noqa: E402

K = 8
HERE = Path(__file__).resolve().parent


def start_server(cpu: int | None) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, str(HERE / "fast_server.py"), "--port", str(port)]
    if cpu is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE)
    line = proc.stdout.readline().decode() if proc.stdout else ""
    if "serving" not in line:
        proc.kill()
        raise SystemExit("fast server did not start")
    return proc, f"http://127.0.0.1:{port}/v1"


def run_pipeline(
    base_url: str, env: str, num_tasks: int, work: Path, max_n: int, concurrency: int, workers: int
) -> dict:
    table, report = tasks_table(num_tasks, K, environments=("math",))
    tasks = table.to_pandas()
    tasks["environment"] = env
    cfg = validate_config(
        {
            "run": "bench",
            "num_shards": 1,
            "entries": [
                {"label": e["label"], "environment": env, "source": "x.jsonl", "num_repeats": K}
                for e in report["entries"]
            ],
            "engine": {
                "mode": "endpoint",
                "base_url": base_url,
                "served_model_name": "fake-model",
                "max_n": max_n,
            },
            "rollout": {"concurrency": concurrency, "verify_workers": workers},
        }
    )
    shutil.rmtree(work, ignore_errors=True)
    run = ShardRun(cfg, "fake-model", tasks, work / "journal", "s0of1")
    missing = ShardJournal(run.tasks, run.journal_dir, run.gen_key).missing()
    todo = sum(len(m) for m in missing)
    progress = Progress(todo, "bench", 1e9, stream=io.StringIO())
    me = psutil.Process()
    cpu0, t0 = me.cpu_times(), time.monotonic()
    work_ = FixedWork(missing, cfg.engine.max_n)
    asyncio.run(run.generate(Endpoint(base_url, "fake-model"), work_, progress))
    wall = time.monotonic() - t0
    cpu1 = me.cpu_times()
    shutil.rmtree(work, ignore_errors=True)
    ok = run.counts.get("ok", 0)
    if ok != todo:
        raise SystemExit(f"{todo - ok} of {todo} rollouts failed: {dict(run.counts)}")
    return {
        "rollouts": todo,
        "wall": wall,
        "rate": todo / wall,
        "cpu": (cpu1.user + cpu1.system - cpu0.user - cpu0.system) / wall,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="smoke size")
    p.add_argument("--mode", choices=["trivial", "math", "both"], default="both")
    p.add_argument("--rollouts", type=int, default=80_000, help="trivial-verifier rollouts")
    p.add_argument("--math-rollouts", type=int, default=4_000)
    p.add_argument("--math-workers", type=int, default=1)
    p.add_argument("--max-n", type=int, default=16, help="engine.max_n (1: one per rollout)")
    p.add_argument("--concurrency", type=int, default=64)
    args = p.parse_args()
    if args.small:
        args.rollouts, args.math_rollouts = 800, 80
    trivial_environment()
    work = default_out("client")
    parts = []
    server, base_url = start_server(1 if os.cpu_count() and os.cpu_count() > 1 else None)
    try:
        sproc = psutil.Process(server.pid)
        if args.mode in ("trivial", "both"):
            pinned = hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1
            all_cpus = os.sched_getaffinity(0) if pinned else None
            if pinned:
                os.sched_setaffinity(0, {0})
            s0 = sum(sproc.cpu_times()[:2])
            r = run_pipeline(
                base_url, "bench_trivial", args.rollouts // K, work, args.max_n, args.concurrency, 1
            )
            server_cpu = (sum(sproc.cpu_times()[:2]) - s0) / r["wall"]
            if pinned:
                os.sched_setaffinity(0, all_cpus)
            n = min(args.max_n, K)
            parts.append(
                f"trivial verifier {r['rate']:.0f} rollouts/s on one core "
                f"({r['rollouts']} rollouts, n={n} requests, concurrency "
                f"{args.concurrency}; client {r['cpu']:.0%} of a core = "
                f"{r['rate'] / max(r['cpu'], 1e-9):.0f} rollouts per client "
                f"CPU-second; server {server_cpu:.0%}) [target >= 2000]"
            )
        if args.mode in ("math", "both"):
            r = run_pipeline(
                base_url,
                "math",
                args.math_rollouts // K,
                work,
                args.max_n,
                args.concurrency,
                args.math_workers,
            )
            parts.append(
                f"math verifier {r['rate'] / args.math_workers:.0f} rollouts/s per "
                f"worker process ({args.math_workers} worker(s), "
                f"{r['rollouts']} rollouts)"
            )
    finally:
        server.kill()
        server.wait()
    print("client: " + "; ".join(parts), flush=True)


if __name__ == "__main__":
    main()

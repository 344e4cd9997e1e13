"""GPU busyness of one engine per shard job vs a shared fleet, on the simulated engine.

    python benchmarks/bench_fleet.py                 # 4 replicas, fixed K and bayes, (a) and (b),
                                                     # then fleet throughput at 1, 2, 4 replicas
    python benchmarks/bench_fleet.py --small         # smoke size: one result line
    python benchmarks/bench_fleet.py --admission     # one job on one replica, batch model only:
                                                     # busy slots per request size n and cap

Runs the real workflow (snakemake with the project's Snakefile, `--cores`, the default workflow
profile) on math tasks `What is a + b?` against rewardprof.testing.sim_engine (continuous
batching, simulated time; nothing here is a GPU measurement):

* (a) per-shard: serve mode as today, one engine per rollout job: `engine.python` is the vLLM
  stand-in (rewardprof.testing.vllm_standin), so each of the 4 shard jobs starts, health-checks
  and stops its own simulated replica.
* (b) fleet: the 4 replicas started once (`python -m rewardprof.testing.sim_engine --replicas
  4 --endpoints-file F`), every shard job a client of all of them (endpoint mode,
  `engine.endpoints_file: F`).

Unequal shards: shard 0 of 4 holds the tasks whose prompt asks to show every step, which the
simulated engine answers 3x longer (`--length-factor`). Both shapes see the same prompts and
seeds, so they must produce the same rewards per (task, rollout), which is checked.

Reported per case, from the replicas' own counters (simulated seconds): slot utilization =
busy slot-seconds / (replicas x max_num_seqs x window) (busy: spent on sequences whose answer
was delivered; slot-seconds of a request moved off a queue after it had started running are
reported apart, as wasted), the window running from the first
request any replica got to the last replica going idle (the tail included); rollouts per
replica-hour over that window; the spread between the first and the last replica going idle;
where the idle slots are: utilization until the tail and in it (the tail starting when the
first engine's batch drains for good: the end of its last 10 s with every slot busy) and per
tenth of the window. Per-shard adaptive starts two engines per shard (the first-round job's
and the main job's, one after the other), counted as the shard's one replica. The load
average at the start and end of each case is printed: the machine may be shared.
Scaling: the fleet on the same workload with 1, 2 and 4 replicas (the time scale is raised as
replicas are removed, so the client sees the same real request rate: simulated time is
independent of it); throughput relative to 4x / 2x the 1-replica throughput.
Targets (issue: acceptance 1): fleet utilization >= 0.85, fleet / per-shard rollouts per
replica-hour >= 1.5 on the unequal case, scaling >= 0.9 of linear.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import default_out  # noqa: E402

from rewardprof.testing.vllm_standin import SIM_ARGS_ENV, write_standin_python  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LONG = "Show every step."  # the prompts the simulated engine answers 3x longer
MODEL = "sim-model"


def write_tasks(path: Path, tasks: int, shards: int) -> None:
    """Task i lands in shard i % shards; shard 0's tasks are the long ones."""
    with path.open("w") as f:
        for i in range(tasks):
            a, b = 17 * i + 3, 29 * i + 11
            long = LONG + " " if i % shards == 0 else ""
            f.write(
                json.dumps({"question": f"{long}What is {a} + {b}?", "expected_answer": str(a + b)})
                + "\n"
            )


def sim_args(args, scale: float, stats: Path) -> list[str]:
    return [
        "--time-scale", str(scale),
        "--median-tokens", str(args.median_tokens),
        "--step-base-s", str(args.step_base_s),
        "--step-per-seq-s", str(args.step_per_seq_s),
        "--length-factor", f"{LONG}=3",
        "--stats-dir", str(stats),
    ]  # fmt: skip


def config(args, work: Path, shape: str, mode: str, scale: float, stats: Path) -> dict:
    cfg = {
        "run": f"{shape}-{mode}",
        "num_shards": args.shards,
        "entries": [
            {
                "label": "math",
                "environment": "math",
                "source": str(work / "tasks.jsonl"),
                "num_repeats": args.k,
            }
        ],
        "sampling": {"temperature": 1.0, "max_tokens": args.max_tokens, "seed": 0},
        "rollout": {"concurrency": args.concurrency, "verify_workers": 1},
        "adaptive": {"mode": "off" if mode == "fixed" else "bayes"},
    }
    if shape == "per-shard":
        cfg["engine"] = {
            "mode": "serve",
            "model": MODEL,
            "python": str(write_standin_python(work / "standin")),
            "serve_args": ["--max-num-seqs", str(args.max_num_seqs)],
            "serve_env": {SIM_ARGS_ENV: shlex.join(sim_args(args, scale, stats))},
            "stop_grace_s": 5,
        }
    else:
        cfg["engine"] = {
            "mode": "endpoint",
            "model": MODEL,
            "endpoints_file": str(work / "fleet" / "endpoints.json"),
            "replica_capacity": args.max_num_seqs,
        }
    return cfg


def start_fleet(args, work: Path, replicas: int, scale: float, stats: Path):
    endpoints = work / "fleet" / "endpoints.json"
    endpoints.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "rewardprof.testing.sim_engine",
        "--replicas", str(replicas), "--max-num-seqs", str(args.max_num_seqs),
        "--model", MODEL, "--endpoints-file", str(endpoints), *sim_args(args, scale, stats),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("serving"):
        raise SystemExit(f"fleet did not start: {line!r}")
    return proc


def run_case(args, shape: str, mode: str, replicas: int) -> dict:
    scale = args.time_scale * args.replicas / replicas
    work = default_out("fleet") / f"{shape}-{mode}-{replicas}"
    shutil.rmtree(work, ignore_errors=True)
    stats = work / "stats"
    stats.mkdir(parents=True)
    write_tasks(work / "tasks.jsonl", args.tasks, args.shards)
    cfg_path = work / "bench.yaml"
    cfg_path.write_text(yaml.safe_dump(config(args, work, shape, mode, scale, stats)))
    fleet = start_fleet(args, work, replicas, scale, stats) if shape == "fleet" else None
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    cmd = [
        "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work),
        f"results/{shape}-{mode}/rollouts.parquet",  # up to merge: profile is not measured here
        "--cores", "8", "--resources", f"engine_slots={args.shards}",
        "--configfile", str(cfg_path),
    ]  # fmt: skip
    t0, load0 = time.monotonic(), os.getloadavg()[0]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=work)
    finally:
        if fleet is not None:
            fleet.send_signal(signal.SIGTERM)
            fleet.wait(30)
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{shape}/{mode}: snakemake failed:\n{proc.stderr[-4000:]}")
    reps = [json.loads(p.read_text()) for p in sorted(stats.glob("replica-*.json"))]
    # per-shard adaptive: each shard's first-round job and its main job start an engine each
    # (never at once): `replicas` engines at a time, their time counted over the same window
    jobs = replicas * (2 if shape == "per-shard" and mode != "fixed" else 1)
    if len(reps) != jobs:
        raise SystemExit(f"{shape}/{mode}: {len(reps)} replica stats, expected {jobs}")
    rollouts = pd.read_parquet(work / f"results/{shape}-{mode}/rollouts.parquet")
    out = summarize(args, shape, mode, replicas, reps, rollouts, wall)
    out["load"] = (load0, os.getloadavg()[0])  # the machine is shared: say how loaded it was
    return out


def busy_between(rep: dict, a: float, b: float) -> float:
    """Busy slot-seconds of one replica between unix times a and b (from its buckets, each
    spread evenly over its bucket)."""
    real = rep["bucket_s"] / rep["time_scale"]
    total = 0.0
    for i, busy in enumerate(rep["busy_buckets"]):
        lo = rep["started_unix"] + i * real
        overlap = min(b, lo + real) - max(a, lo)
        if overlap > 0:
            total += busy * overlap / real
    return total


def full_until(rep: dict, slots: int) -> float:
    """Unix time at the end of the replica's last bucket with every slot busy (its first
    request if never)."""
    real = rep["bucket_s"] / rep["time_scale"]
    full = [i for i, b in enumerate(rep["busy_buckets"]) if b >= 0.99 * slots * rep["bucket_s"]]
    return rep["started_unix"] + (full[-1] + 1) * real if full else rep["first_busy_unix"]


def summarize(args, shape, mode, replicas, reps, rollouts, wall) -> dict:
    sc = reps[0]["time_scale"]
    start = min(r["first_busy_unix"] for r in reps)
    idle = sorted(r["last_idle_unix"] for r in reps)[-replicas:]  # the last engine of each
    end = max(idle)
    window = (end - start) * sc  # simulated seconds
    # work done for nothing (a request moved off a queue after it had started, engine/moves.py)
    # is not busy: only slot-seconds whose sequences were delivered count
    wasted = sum(r.get("aborted_slot_s", 0.0) for r in reps)
    busy = sum(r["busy_slot_s"] for r in reps) - wasted
    ok = int((rollouts["status"] == "ok").sum())
    slots = replicas * args.max_num_seqs
    # the tail: from the first engine's batch draining for good (the end of its last full
    # bucket: no queued sequence left to take a freed slot) to the last one going idle
    last = sorted(reps, key=lambda r: r["last_idle_unix"])[-replicas:]
    tail_at = min(full_until(r, args.max_num_seqs) for r in last)
    tail_busy = sum(busy_between(r, tail_at, end) for r in reps)
    tenths = [start + (end - start) * i / 10 for i in range(11)]
    timeline = [
        sum(busy_between(r, a, b) for r in reps) / (slots * (b - a) * sc)
        for a, b in zip(tenths, tenths[1:], strict=False)
    ]
    return {
        "tail_s": (end - tail_at) * sc,
        "tail_utilization": tail_busy / (slots * max((end - tail_at) * sc, 1e-9)),
        "before_tail_utilization": (busy - tail_busy) / (slots * max((tail_at - start) * sc, 1e-9)),
        "timeline": timeline,
        "shape": shape,
        "mode": mode,
        "replicas": replicas,
        "utilization": busy / (replicas * args.max_num_seqs * window),
        "per_replica_hour": ok / (replicas * window / 3600),
        "throughput_per_h": ok / (window / 3600),
        "idle_spread_s": (max(idle) - min(idle)) * sc,
        "window_s": window,
        "rollouts": ok,
        "failed": int(len(rollouts) - ok),
        "peak_running": max(r["peak_running"] for r in reps),
        "moved": sum(r.get("aborted_sequences", 0) for r in reps),
        "wasted_share": wasted / max(busy + wasted, 1e-9),
        "wall_s": wall,
        "rewards": rollouts.set_index(["task_index", "rollout_index"])["reward"].sort_index(),
    }


def admission_table(args) -> None:
    """One job alone on one replica, in the batch model (no I/O, a few seconds): the share of
    slots busy until its last request went out, for request sizes n and per-replica caps in
    multiples of max_num_seqs (a request counts n until its last sample is out)."""
    from rewardprof.testing.sim_batching import BatchModel, LengthModel

    lengths = LengthModel(args.median_tokens, 1.0)
    print("| n | " + " | ".join(f"cap {h}x" for h in (1, 1.5, 2, 3)) + " |")
    print("|---|---|---|---|---|")
    for n in (1, 2, 4, 8):
        row = []
        for h in (1, 1.5, 2, 3):
            m = BatchModel(args.max_num_seqs, args.step_base_s, args.step_per_seq_s)
            cap, sent, load, left, now = int(args.max_num_seqs * h), 0, 0, {}, 0.0
            while sent < 4000 // n:
                while sent < 4000 // n and (load == 0 or load + n <= cap):
                    seqs = [(f"{sent}/{j}", lengths.length(f"p{sent}", j)) for j in range(n)]
                    m.submit(now, [(k, min(t, args.max_tokens)) for k, t in seqs])
                    left[sent], load, sent = n, load + n, sent + 1
                now = m.next_event()
                m.advance(now)
                for key in m.drain():
                    r = int(key.split("/")[0])
                    left[r] -= 1
                    load -= n if left[r] == 0 else 0
            row.append(f"{m.busy_at_last_submit / (args.max_num_seqs * m.last_submit_at):.2f}")
        print(f"| {n} | " + " | ".join(row) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, kind, default in (
        ("--replicas", int, 4),
        ("--shards", int, 4),
        ("--tasks", int, 640),
        ("--k", int, 8),
        ("--max-num-seqs", int, 64),
        ("--time-scale", float, 40.0),
        ("--median-tokens", float, 1000.0),
        ("--max-tokens", int, 8192),
        ("--step-base-s", float, 0.03),
        ("--step-per-seq-s", float, 0.0005),
        ("--concurrency", int, 64),
    ):
        ap.add_argument(flag, type=kind, default=default)
    ap.add_argument("--modes", default="fixed,bayes")
    ap.add_argument("--shapes", default="per-shard,fleet")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument("--small", action="store_true", help="smoke size: one result line")
    ap.add_argument("--admission", action="store_true", help="one job's admission table only")
    args = ap.parse_args()
    if args.admission:
        admission_table(args)
        return
    if args.small:
        args.replicas = args.shards = 2
        args.tasks, args.k, args.time_scale, args.median_tokens = 12, 4, 120.0, 400.0
        args.modes, args.no_scaling = "fixed", True
    results = []
    for mode in args.modes.split(","):
        for shape in args.shapes.split(","):
            results.append(run_case(args, shape, mode, args.replicas))
    by = {(r["shape"], r["mode"], r["replicas"]): r for r in results}
    for mode in args.modes.split(","):
        pair = [by.get((s, mode, args.replicas)) for s in ("per-shard", "fleet")]
        if all(pair) and not pair[0]["rewards"].equals(pair[1]["rewards"]):
            raise SystemExit(f"{mode}: per-shard and fleet rewards differ")
    if not args.no_scaling:
        mode = args.modes.split(",")[0]
        for n in (1, 2):
            if n < args.replicas:
                results.append(run_case(args, "fleet", mode, n))
    report(args, results)


def report(args, results: list[dict]) -> None:
    one = {r["mode"]: r for r in results if r["shape"] == "fleet" and r["replicas"] == 1}
    if not args.small:
        print(
            "| shape | mode | replicas | slot utilization | rollouts / replica-hour | "
            "first-to-last idle (sim s) | window (sim s) | until the tail | tail (sim s) | "
            "tail utilization | rollouts | moved (sequences) | wasted | peak batch | wall (s) | "
            "load avg (start, end) |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in results:
            print(
                f"| {r['shape']} | {r['mode']} | {r['replicas']} | {r['utilization']:.3f} | "
                f"{r['per_replica_hour']:.0f} | {r['idle_spread_s']:.0f} | {r['window_s']:.0f} | "
                f"{r['before_tail_utilization']:.3f} | {r['tail_s']:.0f} | "
                f"{r['tail_utilization']:.3f} | "
                f"{r['rollouts']} | {r['moved']} | {r['wasted_share']:.4f} | "
                f"{r['peak_running']} | {r['wall_s']:.0f} | "
                f"{r['load'][0]:.1f}, {r['load'][1]:.1f} |"
            )
        print()
        print("slot utilization per tenth of the window:")
        for r in results:
            tenths = " ".join(f"{u:.2f}" for u in r["timeline"])
            print(f"  {r['shape']} {r['mode']} {r['replicas']}: {tenths}")
        print()
    parts = []
    for mode in args.modes.split(","):
        cases = {
            r["shape"]: r for r in results if r["mode"] == mode and r["replicas"] == args.replicas
        }
        a, b = cases.get("per-shard"), cases.get("fleet")
        if a and b:
            gain = b["per_replica_hour"] / a["per_replica_hour"]
            parts.append(
                f"{mode}: utilization per-shard {a['utilization']:.2f} fleet "
                f"{b['utilization']:.2f}, rollouts/replica-h fleet/per-shard {gain:.2f}x, "
                f"idle spread {a['idle_spread_s']:.0f} -> {b['idle_spread_s']:.0f} sim s"
            )
    for mode, base in one.items():
        for r in results:
            if r["shape"] == "fleet" and r["mode"] == mode and r["replicas"] > 1:
                eff = r["throughput_per_h"] / (r["replicas"] * base["throughput_per_h"])
                parts.append(f"scaling 1->{r['replicas']}: {eff:.2f} of linear")
    print(
        f"fleet: {args.replicas} simulated replicas x {args.max_num_seqs} slots; "
        + "; ".join(parts)
    )


if __name__ == "__main__":
    main()

"""Engine-hours as a cluster bills them: one engine per shard job vs a shared fleet, on the
simulated engine (GPU throughput here is simulated; nothing is a GPU measurement).

    python benchmarks/bench_fleet.py --modes fixed --no-scaling   # per-shard vs fleet, 4 engines
    python benchmarks/bench_fleet.py --shapes fleet --shards 16 --modes fixed --no-scaling
                                                     # 16 jobs on one fleet: queues, fairness
    python benchmarks/bench_fleet.py --shapes router --shards 16 --router PATH/vllm-router
                                                     # the same jobs through vllm-router
    python benchmarks/bench_fleet.py --small         # smoke size: one result line
    python benchmarks/bench_fleet.py --admission     # one job on one replica, batch model only:
                                                     # busy slots per request size n and cap

Runs the real workflow (snakemake with the project's Snakefile, the default workflow profile)
on math tasks `What is a + b?` against rewardprof.testing.sim_engine (continuous batching in
simulated time; `--time-scale` simulated seconds per real second, one scale for every case):

* per-shard: serve mode, one engine per rollout job (`engine.python` is the vLLM stand-in,
  rewardprof.testing.vllm_standin): each shard job starts, loads (`--load-s` simulated seconds
  of model load, /health 503 until then), uses and stops its own engine; `--replicas` engines
  at a time (Snakemake's engine_slots), the other shard jobs queue for one, as on a cluster
  with that many GPUs (16 shards on 4 engines: `--shards 16`).
* fleet: `--replicas` engines started once (`python -m rewardprof.testing.sim_engine
  --replicas N --endpoints-file F`, the same model load), every shard job a client of all of
  them at once (`engine.endpoints_file: F`).
* router (`--router`): the fleet's engines behind vllm-router (`--policy`), each shard job
  sending to its one URL with `rollout.concurrency` = twice the fleet's slots over the jobs.

Materialize and shard run first; the engines are held only while the rollout jobs run (the
fleet started just before them, stopped once they are done); merge runs after.
`--long spread` (default, equal shards): every 5th task asks to show every step, which the
engine answers 3x longer, spread over every shard as the strided layout spreads a real mix;
`--long shard0`: shard 0's tasks are the long ones (unequal shards). Every shape sees the same
prompts and seeds, so they must produce the same rewards per (task, rollout), which is checked.

Reported per case, from the engines' own counters (simulated): engine-hours held (each engine
from its start, model load included, to its release) and rollouts per engine-hour held, the
figure a cluster bill follows; slot utilization = busy slot-seconds / (engines at once x
max_num_seqs x window), the window from the first request any engine got to the last going
idle; utilization until the tail and in it (the tail: from the first engine's batch draining
for good to the last going idle) and per tenth of the window; the most sequences waiting on
one engine; sequences moved off a queue and the slot-seconds they had run (wasted); each
job's rollouts per second while it ran, over the mean (fairness); which bound the run: the
engines (slots full until the tail) or the clients (then lower --time-scale); the load
average at the start and end (the machine may be shared). Scaling: the fleet with 1, 2 and
4 engines at the same time scale, throughput relative to linear.
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
ROUTER = "http://vllm-router.invalid/v1"  # replaced by the router's URL once it runs


def is_long(i: int, args) -> bool:
    """Whether task i is one the engine answers 3x longer: every 5th task (spread over every
    shard: equal shards, as the strided layout gives a real mix), or shard 0's (unequal)."""
    return i % (args.shards if args.long == "shard0" else 5) == 0


def write_tasks(path: Path, args) -> None:
    """Task i lands in shard i % shards."""
    with path.open("w") as f:
        for i in range(args.tasks):
            a, b = 17 * i + 3, 29 * i + 11
            long = LONG + " " if is_long(i, args) else ""
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
        "--load-s", str(args.load_s),
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
    if shape == "router":  # one URL, vllm-router in front of the fleet: no client balancing
        cfg["engine"] = {"mode": "endpoint", "model": MODEL, "base_url": ROUTER}
        # the jobs together keep twice the fleet's slots in flight (as the client's admission:
        # slots plus a queue of as many), requests of K sequences
        slots = args.replicas * args.max_num_seqs
        cfg["rollout"]["concurrency"] = max(1, 2 * slots // (args.k * args.shards))
    elif shape == "per-shard":
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


def start_router(args, endpoints: Path) -> tuple[subprocess.Popen, str]:
    """vllm-router (--router) in front of the fleet's replicas, its base URL once healthy."""
    import socket
    import urllib.request

    roots = [u.removesuffix("/v1") for u in json.loads(endpoints.read_text())["endpoints"]]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [args.router, "--host", "127.0.0.1", "--port", str(port), "--policy", args.policy,
           "--worker-urls", *roots, "--log-level", "error"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("vllm-router did not become healthy")


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
    scale = args.time_scale  # one time scale for every case: simulated time is comparable
    work = default_out("fleet") / f"{shape}-{mode}-{replicas}"
    shutil.rmtree(work, ignore_errors=True)
    stats = work / "stats"
    stats.mkdir(parents=True)
    write_tasks(work / "tasks.jsonl", args)
    cfg_path = work / "bench.yaml"
    cfg_path.write_text(yaml.safe_dump(config(args, work, shape, mode, scale, stats)))
    run = f"results/{shape}-{mode}"
    # materialize and shard first (no engine needed); then the engines are held only while
    # the rollout jobs run: the fleet started just before them and stopped once they are
    # done, as a per-shard engine lives only inside its job; merge afterwards
    snakemake(
        args,
        work,
        cfg_path,
        replicas,
        [f"{run}/shards/{i}-of-{args.shards}.parquet" for i in range(args.shards)],
    )
    fleet = start_fleet(args, work, replicas, scale, stats) if shape != "per-shard" else None
    router = None
    t0, load0 = time.monotonic(), os.getloadavg()[0]
    if shape == "router":  # the router needs the replicas up: wait their model load
        router, url = start_router(args, work / "fleet" / "endpoints.json")
        cfg_path.write_text(cfg_path.read_text().replace(ROUTER, url))
    try:
        snakemake(
            args,
            work,
            cfg_path,
            replicas,
            [f"{run}/rollouts/{i}-of-{args.shards}.parquet" for i in range(args.shards)],
        )
    finally:
        if router is not None:
            router.kill()
            router.wait(30)
        if fleet is not None:
            fleet.send_signal(signal.SIGTERM)
            fleet.wait(30)
    wall = time.monotonic() - t0
    snakemake(args, work, cfg_path, replicas, [f"{run}/rollouts.parquet"])
    reps = [json.loads(p.read_text()) for p in sorted(stats.glob("replica-*.json"))]
    # per-shard: every rollout job starts its own engine (adaptive: each shard's first-round
    # job and its main job, one after the other), `replicas` of them at a time
    per_shard = args.shards * (2 if mode != "fixed" else 1)
    jobs = per_shard if shape == "per-shard" else replicas
    if len(reps) != jobs:
        raise SystemExit(f"{shape}/{mode}: {len(reps)} replica stats, expected {jobs}")
    rollouts = pd.read_parquet(work / f"results/{shape}-{mode}/rollouts.parquet")
    out = summarize(args, shape, mode, replicas, reps, rollouts, wall)
    out.update(held(reps, out["rollouts"]))
    out["job_rates"] = job_rates(work / f"results/{shape}-{mode}", rollouts, args.shards)
    out["load"] = (load0, os.getloadavg()[0])  # the machine is shared: say how loaded it was
    return out


def snakemake(args, work: Path, cfg_path: Path, replicas: int, targets: list[str]) -> None:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    cmd = [
        "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(work), *targets,
        # per-shard: `replicas` engines at a time, the other shard jobs queue for one (as on a
        # cluster with that many GPUs); fleet: every shard job at once (CPU-only clients)
        "--cores", str(max(8, args.shards + 2)), "--resources", f"engine_slots={replicas}",
        "--configfile", str(cfg_path),
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=work)
    if proc.returncode != 0:
        raise SystemExit(f"{work.name}: snakemake failed:\n{proc.stderr[-4000:]}")


def held(reps: list[dict], ok: int) -> dict:
    """Engine-hours as a cluster bills them: each engine from its start (its model load
    included) to its release, in simulated hours; rollouts per engine-hour held."""
    hours = sum((r["stopped_unix"] - r["started_unix"]) * r["time_scale"] for r in reps) / 3600
    loading = sum(r["load_s"] for r in reps) / 3600
    return {
        "engines": len(reps),
        "held_h": hours,
        "load_share": loading / max(hours, 1e-9),
        "per_held_hour": ok / max(hours, 1e-9),
        "peak_waiting": max(r["peak_waiting"] for r in reps),
    }


def job_rates(results: Path, rollouts: pd.DataFrame, shards: int) -> list[float]:
    """Each rollout job's rollouts per real second while it ran (its Snakemake benchmark)."""
    ok = rollouts[rollouts["status"] == "ok"]
    per_shard = ok.groupby(ok["task_index"] % shards).size()
    rates = []
    for i in range(shards):
        tsv = results / "benchmarks" / "rollout" / f"{i}-of-{shards}.tsv"
        if tsv.exists():
            wall = float(pd.read_csv(tsv, sep="\t")["s"].iloc[0])
            rates.append(per_shard.get(i, 0) / max(wall, 1e-9))
    return rates


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
        ("--time-scale", float, 6.0),
        ("--load-s", float, 120.0),
        ("--median-tokens", float, 1000.0),
        ("--max-tokens", int, 8192),
        ("--step-base-s", float, 0.03),
        ("--step-per-seq-s", float, 0.0005),
        ("--concurrency", int, 64),
    ):
        ap.add_argument(flag, type=kind, default=default)
    ap.add_argument("--modes", default="fixed,bayes")
    ap.add_argument(
        "--long",
        choices=("spread", "shard0"),
        default="spread",
        help="3x longer answers for every 5th task (equal shards) or shard 0's",
    )
    ap.add_argument("--shapes", default="per-shard,fleet")
    ap.add_argument("--no-scaling", action="store_true")
    ap.add_argument(
        "--router",
        help="vllm-router executable: adds the shape router (fleet "
        "replicas behind vllm-router, one URL per job)",
    )
    ap.add_argument("--policy", default="power_of_two", help="vllm-router's --policy")
    ap.add_argument("--small", action="store_true", help="smoke size: one result line")
    ap.add_argument("--admission", action="store_true", help="one job's admission table only")
    args = ap.parse_args()
    if args.admission:
        admission_table(args)
        return
    if args.small:
        args.replicas = args.shards = 2
        args.load_s = 10.0
        args.tasks, args.k, args.time_scale, args.median_tokens = 12, 4, 120.0, 400.0
        args.modes, args.no_scaling = "fixed", True
    results = []
    for mode in args.modes.split(","):
        for shape in args.shapes.split(","):
            results.append(run_case(args, shape, mode, args.replicas))
    by = {(r["shape"], r["mode"], r["replicas"]): r for r in results}
    for mode in args.modes.split(","):
        got = [
            by[(s, mode, args.replicas)]
            for s in ("per-shard", "fleet", "router")
            if (s, mode, args.replicas) in by
        ]
        if any(not got[0]["rewards"].equals(r["rewards"]) for r in got[1:]):
            raise SystemExit(f"{mode}: the shapes' rewards differ")
    if not args.no_scaling:
        mode = args.modes.split(",")[0]
        for n in (1, 2):
            if n < args.replicas:
                results.append(run_case(args, "fleet", mode, n))
    report(args, results)


def bound(r: dict) -> str:
    """What bound the run: the engines when their slots were full until the tail, else the
    clients (lower --time-scale until it says engines)."""
    return "engines" if r["before_tail_utilization"] >= 0.95 else "clients"


def fairness(r: dict) -> str:
    rates = r["job_rates"]
    if len(rates) < 2 or r["shape"] == "per-shard":
        return "-"
    mean = sum(rates) / len(rates)
    return f"{min(rates) / mean:.2f}-{max(rates) / mean:.2f}"


def table(args, results: list[dict]) -> None:
    print(
        "| shape | mode | shards | engines at once | engines started | engine-h held (sim) | "
        "of it loading | rollouts / engine-h held | slot utilization | until the tail | "
        "tail (sim s) | window (sim s) | peak waiting / replica | moved | wasted | "
        "job rate / mean (min-max) | bound | rollouts | wall (s) | load avg |"
    )
    print("|" + "---|" * 20)
    for r in results:
        print(
            f"| {r['shape']} | {r['mode']} | {args.shards} | {r['replicas']} | {r['engines']} | "
            f"{r['held_h']:.2f} | {r['load_share']:.1%} | {r['per_held_hour']:.0f} | "
            f"{r['utilization']:.3f} | {r['before_tail_utilization']:.3f} | {r['tail_s']:.0f} | "
            f"{r['window_s']:.0f} | {r['peak_waiting']} | {r['moved']} | "
            f"{r['wasted_share']:.4f} | {fairness(r)} | {bound(r)} | {r['rollouts']} | "
            f"{r['wall_s']:.0f} | {r['load'][0]:.1f}, {r['load'][1]:.1f} |"
        )
    print("\nslot utilization per tenth of the window:")
    for r in results:
        print(
            f"  {r['shape']} {r['mode']} {r['replicas']}: "
            + " ".join(f"{u:.2f}" for u in r["timeline"])
        )
    print()


def report(args, results: list[dict]) -> None:
    if not args.small:
        table(args, results)
    parts = []
    for mode in args.modes.split(","):
        cases = {
            r["shape"]: r for r in results if r["mode"] == mode and r["replicas"] == args.replicas
        }
        a, b, c = cases.get("per-shard"), cases.get("fleet"), cases.get("router")
        if b and c:
            parts.append(
                f"{mode}: vllm-router ({args.policy}) / client balancing: rollouts per engine-hour "
                f"held {c['per_held_hour'] / b['per_held_hour']:.2f}x, peak waiting per replica "
                f"{c['peak_waiting']} vs {b['peak_waiting']}"
            )
        if a and b:
            parts.append(
                f"{mode}: rollouts per engine-hour held fleet/per-shard "
                f"{b['per_held_hour'] / a['per_held_hour']:.2f}x "
                f"({b['per_held_hour']:.0f} vs {a['per_held_hour']:.0f}), makespan "
                f"{a['window_s'] / b['window_s']:.2f}x shorter"
            )
    one = {r["mode"]: r for r in results if r["shape"] == "fleet" and r["replicas"] == 1}
    for mode, base in one.items():
        for r in results:
            if r["shape"] == "fleet" and r["mode"] == mode and r["replicas"] > 1:
                eff = r["throughput_per_h"] / (r["replicas"] * base["throughput_per_h"])
                parts.append(f"{mode} scaling 1->{r['replicas']}: {eff:.2f} of linear")
    print(
        f"fleet bench: {args.replicas} simulated engines x {args.max_num_seqs} slots, "
        f"{args.shards} shards ({args.long}), time scale {args.time_scale:g}, model load "
        f"{args.load_s:g} sim s per engine start; " + "; ".join(parts)
    )


if __name__ == "__main__":
    main()

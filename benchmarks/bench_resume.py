"""Resume start: a shard of 1M (task, rollout) pairs with 99.9% already journaled.

    python benchmarks/bench_resume.py                   # 125,000 tasks x 8, 999,000 journaled
    python benchmarks/bench_resume.py --other-shards 15 # + 15 other shards' records in the
                                                        #   shared journal (a 16-shard sweep)
    python benchmarks/bench_resume.py --small           # smoke size

The journal is what a killed job leaves: 20k-record Parquet segments with 0.5-8 kB completions,
a JSONL tail of the last records with a torn last line. Then `rewardprof rollout` (the command
the workflow runs) starts against a fake OpenAI server in this process; the result is the time
from starting the command to the first new request reaching the server, after which the job is
stopped with SIGTERM. Target: <= 5 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import Text, default_out, rollout_batch, tasks_table, write_parquet  # noqa: E402

from rewardprof.manifest.load import validate_config  # noqa: E402
from rewardprof.stages import ShardPaths, shard  # noqa: E402
from rewardprof.store.schemas import COLUMN_NAMES, ROLLOUT_SCHEMA  # noqa: E402
from rewardprof.store.seeds import gen_key  # noqa: E402
from rewardprof.store.shards import ShardPosition  # noqa: E402
from rewardprof.testing.fake_server import FakeOpenAI  # noqa: E402

K = 8
SEGMENT = 20_000
TAIL = 20_000  # the most a tail holds (rollout.segment_max_records)


def make_config(report: dict, base_url: str) -> dict:
    return {
        "run": "bench",
        "num_shards": 1,
        "entries": [
            {
                "label": e["label"],
                "environment": e["environment"],
                "source": f"{e['label']}.jsonl",
                "num_repeats": K,
            }
            for e in report["entries"]
        ],
        "engine": {"mode": "endpoint", "base_url": base_url, "served_model_name": "fake-model"},
        "rollout": {"concurrency": 64},
    }


def prepare(d: Path, num_tasks: int, other_shards: int) -> None:
    marker = d / "READY.json"
    spec = {"tasks": num_tasks, "other": other_shards}
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return
    shutil.rmtree(d, ignore_errors=True)
    (d / "journal").mkdir(parents=True)
    table, report = tasks_table(num_tasks, K)
    write_parquet(table, d / "all_tasks.parquet")
    one_shard = ShardPaths(
        tasks=d / "all_tasks.parquet", out=d / "tasks.parquet", shard=ShardPosition(0, 1)
    )
    shard.run(None, one_shard)  # as the shard rule does
    (d / "report.json").write_text(json.dumps(report))
    key = gen_key(validate_config(make_config(report, "http://x")), "fake-model")
    ids = table.column("task_id").to_numpy(zero_copy_only=False)
    labels = table.column("label").to_numpy(zero_copy_only=False)
    text, rng = Text(2), np.random.default_rng(2)
    pairs = num_tasks * K
    journaled = pairs - pairs // 1000  # 99.9%: the last tasks were never generated
    ti_all = np.repeat(np.arange(num_tasks), K)[:journaled]
    ri_all = np.tile(np.arange(K), num_tasks)[:journaled]
    seg_end = journaled - min(TAIL, journaled // 10)
    writer = "s0of1-1700000000-host-1"
    seq = -1
    for seq, a in enumerate(range(0, seg_end, SEGMENT)):
        b = min(a + SEGMENT, seg_end)
        ti, ri = ti_all[a:b], ri_all[a:b]
        batch = rollout_batch(ti, ri, ids[ti].tolist(), labels[ti].tolist(), key, text, rng)
        write_parquet(_table(batch), d / "journal" / f"{writer}.{seq:06d}.parquet")
    ti, ri = ti_all[seg_end:], ri_all[seg_end:]
    tail = rollout_batch(ti, ri, ids[ti].tolist(), labels[ti].tolist(), key, text, rng)
    with (d / "journal" / f"{writer}.{seq + 1:06d}.jsonl").open("w") as f:
        for rec in tail.to_pylist():
            f.write(json.dumps({k: rec[k] for k in COLUMN_NAMES}) + "\n")
        f.write('{"task_index": 12, "rollout_ind')  # the torn last line of a kill
    # other shards of the same sweep write to the same journal directory
    for s in range(other_shards):
        base = (s + 1) * 10**8  # task indices/ids of no task of this shard
        for seq, a in enumerate(range(0, pairs, SEGMENT)):
            n = min(SEGMENT, pairs - a)
            ti, ri = base + np.arange(a, a + n) // K, np.arange(a, a + n) % K
            batch = rollout_batch(
                ti, ri, [f"{t:032x}" for t in ti.tolist()], ["x"] * n, key, text, rng
            )
            write_parquet(
                _table(batch), d / "journal" / f"s{s + 1}of16-1700000000-host-1.{seq:06d}.parquet"
            )
    marker.write_text(json.dumps(spec))


def _table(batch):
    import pyarrow as pa

    return pa.Table.from_batches([batch], schema=ROLLOUT_SCHEMA)


def measure(d: Path, log_path: Path) -> tuple[float, int]:
    first: dict[str, float] = {}
    hit = threading.Event()

    def fault_fn(body: dict) -> str | None:
        first.setdefault("t", time.monotonic())
        hit.set()
        return None

    with FakeOpenAI(fault_fn=fault_fn) as server:
        report = json.loads((d / "report.json").read_text())
        cfg = make_config(report, server.base_url)
        work = d.parent / "run"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(d / "journal", work / "journal", copy_function=os.link)
        exe = str(Path(sys.executable).with_name("rewardprof"))
        with log_path.open("w") as log:
            t0 = time.monotonic()
            proc = subprocess.Popen(
                [
                    exe,
                    "rollout",
                    "--config-json",
                    json.dumps(cfg),
                    "--tasks",
                    str(d / "tasks.parquet"),
                    "--journal",
                    str(work / "journal"),
                    "--out",
                    str(work / "out.parquet"),
                    "--shard",
                    "0",
                    "--num-shards",
                    "1",
                ],
                stderr=log,
                start_new_session=True,
            )
            ok = hit.wait(300)
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(work, ignore_errors=True)
        if not ok:
            raise SystemExit(f"no request within 300 s; see {log_path}")
        return first["t"] - t0, server.stats["requests"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="smoke size (2,500 tasks)")
    p.add_argument("--tasks", type=int, default=125_000)
    p.add_argument(
        "--other-shards",
        type=int,
        default=0,
        help="other shards' records (1M pairs each) in the shared journal",
    )
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--clean", action="store_true", help="delete the generated data after")
    args = p.parse_args()
    if args.small:
        args.tasks = 2500
    name = f"resume_{args.tasks}_{args.other_shards}"
    out = args.out or default_out(name)
    prepare(out / "data", args.tasks, args.other_shards)
    try:
        seconds, _ = measure(out / "data", out / "rollout.log")
    finally:
        if args.clean:
            shutil.rmtree(out, ignore_errors=True)
    pairs = args.tasks * K
    extra = (
        f" + {args.other_shards} other shards' {args.other_shards * pairs} records"
        if args.other_shards
        else ""
    )
    print(
        f"resume: first new request {seconds:.2f} s after start; shard of {pairs} pairs, "
        f"{pairs - pairs // 1000} journaled{extra} [target <= 5 s]",
        flush=True,
    )


if __name__ == "__main__":
    main()

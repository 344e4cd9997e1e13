"""Client-side balancing (engine/balancer.py) against vllm-router in front of the same replicas.

    python benchmarks/bench_balancer.py --router /path/to/vllm-router
    python benchmarks/bench_balancer.py --small       # smoke size, client balancing only

Replicas: `--replicas` processes of benchmarks/fast_server.py, each answering every request
after `--latency` seconds (a generation's time; no CPU spent), so what differs between the two
ways is the balancing. The client is the rollout client (`ChatClient`, its retries and backoff
as configured by default) in this process:

- client: `ChatClient` with a `Balancer` over the replica URLs (capacity per replica
  `--capacity`: bounded admission);
- router: `ChatClient` on one URL, vllm-router (`--policy`, its default retries, circuit
  breaker and health checks) forwarding to the replicas.

For each concurrency: requests/s, failed requests, median and p99 latency, and the latency
added over `--latency` at concurrency 1. Failover: at concurrency `--failover-concurrency`, one
replica is SIGKILLed a second into the run; reported: failed requests, and how long the requests
in flight at the kill took to finish after it (the longest: the failover time a rollout sees).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp

from rewardprof.core.config import Rollout
from rewardprof.engine.balancer import Balancer
from rewardprof.engine.client import ChatClient

HERE = Path(__file__).resolve().parent
BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "n": 1, "seed": 1}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_health(root: str, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(root + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{what} not healthy after 60 s")


def start_replicas(n: int, latency: float) -> list[tuple[subprocess.Popen, str]]:
    out = []
    for _ in range(n):
        port = _port()
        cmd = [sys.executable, str(HERE / "fast_server.py"), "--port", str(port)]
        proc = subprocess.Popen([*cmd, "--latency", str(latency)], stdout=subprocess.DEVNULL)
        _wait_health(f"http://127.0.0.1:{port}", proc, "replica")
        out.append((proc, f"http://127.0.0.1:{port}"))
    return out


def start_router(router: str, roots: list[str], policy: str) -> tuple[subprocess.Popen, str]:
    port = _port()
    cmd = [router, "--host", "127.0.0.1", "--port", str(port), "--policy", policy]
    cmd += ["--worker-urls", *roots, "--log-level", "error"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_health(f"http://127.0.0.1:{port}", proc, "vllm-router")
    return proc, f"http://127.0.0.1:{port}"


async def load(urls: list[str], concurrency: int, requests: int, capacity: int, kill=None) -> dict:
    """`requests` chat requests, `concurrency` at a time; `kill` = (after_s, pid)."""
    settings = Rollout()  # the rollout client's defaults: 600 s timeout, 4 attempts, 1 s backoff
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency)
    spans: list[tuple[float, float, bool]] = []
    balancer = Balancer([u + "/v1" for u in urls], capacity) if len(urls) > 1 else None
    todo = iter(range(requests))
    killed_at: list[float] = []
    async with aiohttp.ClientSession(connector=connector) as session:
        client = ChatClient(
            session, urls[0] + "/v1", None, settings, random.Random(0), balancer=balancer
        )
        probing = asyncio.ensure_future(balancer.watch(session)) if balancer else None

        async def worker() -> None:
            for _ in todo:
                t0 = time.monotonic()
                result = await client.complete(dict(BODY))
                spans.append((t0, time.monotonic(), result.failure is None))

        async def killer() -> None:
            await asyncio.sleep(kill[0])
            killed_at.append(time.monotonic())
            os.kill(kill[1], signal.SIGKILL)

        t0 = time.monotonic()
        tasks = [asyncio.ensure_future(worker()) for _ in range(concurrency)]
        if kill:
            tasks.append(asyncio.ensure_future(killer()))
        await asyncio.gather(*tasks)
        wall = time.monotonic() - t0
        if probing:
            probing.cancel()
            await asyncio.gather(probing, return_exceptions=True)
    lat = sorted(end - start for start, end, _ in spans)
    out = {
        "concurrency": concurrency,
        "requests": len(spans),
        "failed": sum(not ok for *_, ok in spans),
        "req_per_s": round(len(spans) / wall, 1),
        "p50_ms": round(1000 * statistics.median(lat), 1),
        "p99_ms": round(1000 * lat[int(0.99 * (len(lat) - 1))], 1),
    }
    if killed_at:
        k = killed_at[0]
        caught = [end - k for start, end, _ in spans if start < k < end]
        out["in_flight_at_kill"] = len(caught)
        out["failover_s"] = round(max(caught), 2) if caught else 0.0
    return out


def run(args: argparse.Namespace) -> dict:
    ways = ("client", "router") if args.router else ("client",)
    results: dict[str, list[dict]] = {way: [] for way in ways}
    for way in ways:
        replicas = start_replicas(args.replicas, args.latency)
        roots = [root for _, root in replicas]
        router = start_router(args.router, roots, args.policy) if way == "router" else None
        urls = [router[1]] if router else roots
        try:
            base = asyncio.run(load(urls, 1, 50, args.capacity))
            base["added_ms"] = round(base["p50_ms"] - 1000 * args.latency, 2)
            results[way].append(base)
            for c in args.concurrency:
                results[way].append(asyncio.run(load(urls, c, c * args.rounds, args.capacity)))
            c = args.failover_concurrency
            victim = replicas[0][0].pid
            failover = asyncio.run(load(urls, c, c * args.rounds * 2, args.capacity, (1.0, victim)))
            results[way].append(dict(failover, failover=True))
        finally:
            for proc, _ in replicas + ([router] if router else []):
                proc.kill()
                proc.wait()
        for row in results[way]:
            print(way, json.dumps(row), file=sys.stderr, flush=True)
    return results


def summary(results: dict[str, list[dict]]) -> str:
    """The one result line: per way, the top concurrency's rate and the failover."""
    parts = []
    for way, rows in results.items():
        top = [r for r in rows if not r.get("failover")][-1]
        fo = [r for r in rows if r.get("failover")][0]
        parts.append(
            f"{way} {top['req_per_s']} req/s at {top['concurrency']} in flight, "
            f"{top['failed']} failed; added {rows[0]['added_ms']} ms; failover "
            f"{fo['failover_s']} s, {fo['failed']} failed"
        )
    return "balancer: " + "; ".join(parts)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--router", help="the vllm-router executable (without: client only)")
    p.add_argument("--policy", default="power_of_two", help="vllm-router --policy")
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--latency", type=float, default=0.2, help="seconds per answer")
    p.add_argument("--capacity", type=int, default=256, help="client: sequences per replica")
    p.add_argument("--concurrency", type=int, nargs="+", default=[64, 512, 2048])
    p.add_argument("--rounds", type=int, default=10, help="requests per worker")
    p.add_argument("--failover-concurrency", type=int, default=256)
    p.add_argument("--small", action="store_true", help="smoke size")
    args = p.parse_args()
    if args.small:
        args.concurrency, args.rounds, args.failover_concurrency = [32], 3, 32
    print(summary(run(args)), flush=True)


if __name__ == "__main__":
    main()

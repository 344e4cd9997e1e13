"""Slots kept busy while episodes wait on their tools, on the simulated engine (GPU throughput here
is simulated; nothing is a GPU measurement).

    python benchmarks/bench_episodes.py                    # tool latency 0.1, 0.5, 1 and 2 s
    python benchmarks/bench_episodes.py --small            # smoke size: one latency

Episodes of an environment that acts run through the rollout stage (`run_shard`, in process,
as a rollout job runs it) against rewardprof.testing.sim_engine: `--slots` sequences at a time,
continuous batching in simulated time (`--time-scale` simulated seconds per real second), each
turn's length drawn log-normal around `--median-tokens`. The environment is `nemo_gym`, its
resource server a stand-in whose every tool call takes `--latency` simulated seconds on the
server, so the rollout client only waits for it (as for any remote tool; a local tool runs in
the verification pool, off the client's event loop, the same way). Each episode makes
`--tool-turns` calls, one per turn, then answers.

Reported per latency, from the engine's own counters (simulated): slot utilization (busy
slot-seconds over slots x the window from the first request to the engine's last idle), the same
before the tail (the tenths of the window before the first one under 0.9 for good), episodes per
replica-hour held (the engine from its start, `--load-s` of simulated model load included, to
its release after the last episode), and which bound the run: the engine (slots full until the
tail) or the client and its tools.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from aiohttp import web

from rewardprof.engine.session import Endpoint
from rewardprof.manifest.load import validate_config
from rewardprof.stages import MaterializePaths, materialize
from rewardprof.stages.rollout.shard_job import EngineOpener, ShardJob, run_shard
from rewardprof.testing.openai_http import BackgroundServer
from rewardprof.testing.sim_batching import LengthModel
from rewardprof.testing.sim_engine import SimEngine, SimSettings

_SUM = re.compile(r"What is (\d+) \+ (\d+)\?")


class SlowTools(BackgroundServer):
    """A NeMo Gym resource server stand-in: /seed_session, one tool that takes `latency_s` real
    seconds, and /verify (1 when the episode's last message boxes the sum its prompt asks)."""

    def __init__(self, latency_s: float):
        super().__init__()
        self.latency_s = latency_s
        self.calls = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/{path}", self._handle)

    async def _handle(self, request: web.Request) -> web.Response:
        path, body = request.match_info["path"], await request.json()
        if path == "seed_session":
            return web.json_response({})
        if path == "verify":
            return web.json_response({"reward": _reward(body)})
        self.calls += 1
        await asyncio.sleep(self.latency_s)
        return web.json_response({"value": 1})


def _reward(body: dict) -> float:
    asked = _SUM.search(body["responses_create_params"]["input"][0]["content"])
    said = [i for i in body["response"]["output"] if i["type"] == "message"]
    text = said[-1]["content"][0]["text"] if said else ""
    right = f"\\boxed{{{int(asked.group(1)) + int(asked.group(2))}}}" if asked else None
    return float(right is not None and right in text)


def _rows(n: int) -> list[dict]:
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    return [
        {
            "responses_create_params": {
                "input": [{"role": "user", "content": f"What is {i} + {2 * i + 1}?"}],
                "tools": [tool],
            }
        }
        for i in range(n)
    ]


def run_case(args: argparse.Namespace, latency: float, work: Path) -> dict:
    """One latency: the episodes run; what the engine and the client measured."""
    scale = args.time_scale
    settings = SimSettings(
        max_num_seqs=args.slots,
        time_scale=scale,
        lengths=LengthModel(median=args.median_tokens, sigma=0.5),
        tool_turns=args.tool_turns,
    )
    source = work / "agent.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in _rows(args.tasks)))
    with SimEngine(settings) as sim, SlowTools(latency / scale) as tools:
        cfg = validate_config(
            {
                "run": "bench",
                "num_shards": 1,
                "entries": [
                    {
                        "label": "agent",
                        "environment": "nemo_gym",
                        "source": str(source),
                        "num_repeats": args.repeats,
                        "options": {
                            "base_url": f"http://127.0.0.1:{tools.port}",
                            "max_steps": args.tool_turns + 1,
                            "max_total_tokens": 1 << 20,
                        },
                    }
                ],
                "engine": {"mode": "endpoint", "base_url": sim.base_url, "model": "sim-model"},
                "sampling": {"max_tokens": 1 << 16},
                "rollout": {"concurrency": args.concurrency, "verify_workers": 1},
            },
            origin="bench",
        )
        tasks = work / "tasks.parquet"
        materialize.run(
            cfg, MaterializePaths(tasks=tasks, report=work / "report.json", base_dir=work)
        )
        endpoint = Endpoint(sim.base_url, "sim-model", None, identity="sim")
        started = time.monotonic()
        out = work / "out.parquet"
        run_shard(
            ShardJob(cfg, tasks, work / "journal", out, "0-of-1"), EngineOpener.running(endpoint)
        )
        wall = time.monotonic() - started
        st = sim.stats()
        calls = tools.calls
    import pandas as pd  # here: the bench's own import stays light until a case has run

    done = pd.read_parquet(out)
    window = (st["last_idle_unix"] - st["first_busy_unix"]) * scale
    util = st["busy_slot_s"] / (args.slots * window)
    tenths = _tenths(st, args.slots, window)
    before_tail = _before_tail(tenths)
    held_h = (args.load_s + window) / 3600
    return {
        "latency_s": latency,
        "episodes": len(done),
        "ok": int((done["status"] == "ok").sum()),
        "tool_calls": calls,
        "model_turns": st["requests"],
        "window_sim_s": round(window, 1),
        "utilization": round(util, 3),
        "utilization_before_tail": round(before_tail, 3),
        "utilization_tenths": [round(t, 2) for t in tenths],
        "episodes_per_replica_hour_held": round(len(done) / held_h, 1),
        "bound": "engine" if before_tail >= 0.9 else "client/tools",
        "peak_running": st["peak_running"],
        "wall_s": round(wall, 1),
    }


def _tenths(st: dict, slots: int, window: float) -> list[float]:
    """Busy share of the slots per tenth of the window (from the engine's busy buckets)."""
    buckets, size = st["busy_buckets"], st["bucket_s"]
    start = (st["first_busy_unix"] - st["started_unix"]) * st["time_scale"]
    out = []
    for k in range(10):
        lo, hi = start + k * window / 10, start + (k + 1) * window / 10
        busy = 0.0
        for i, b in enumerate(buckets):
            overlap = max(0.0, min(hi, (i + 1) * size) - max(lo, i * size))
            busy += b * overlap / size
        out.append(busy / (slots * (hi - lo)))
    return out


def _before_tail(tenths: list[float]) -> float:
    """Mean busy share of the tenths before the tail (from the first tenth under 0.9 after
    which none is over it again)."""
    end = len(tenths)
    while end > 1 and tenths[end - 1] < 0.9:
        end -= 1
    return sum(tenths[:end]) / end


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--latencies", default="0.1,0.5,1,2", help="simulated seconds per tool call")
    p.add_argument("--tasks", type=int, default=96)
    p.add_argument("--repeats", type=int, default=4)
    p.add_argument("--slots", type=int, default=32, help="the engine's max_num_seqs")
    p.add_argument("--tool-turns", type=int, default=3, help="calls per episode, one a turn")
    p.add_argument("--median-tokens", type=float, default=200.0, help="median tokens a turn")
    p.add_argument("--time-scale", type=float, default=20.0)
    p.add_argument("--load-s", type=float, default=120.0, help="simulated model load")
    p.add_argument("--concurrency", type=int, default=64, help="rollout.concurrency")
    p.add_argument("--small", action="store_true", help="smoke size: 16 tasks, one latency")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    latencies = [float(x) for x in args.latencies.split(",")]
    if args.small:
        args.tasks, latencies = 16, latencies[2:3] or latencies[:1]
    results = []
    for latency in latencies:
        work = Path(tempfile.mkdtemp(prefix="rewardprof-bench-episodes-"))
        try:
            res = run_case(args, latency, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        results.append(res)
        print(
            f"tool latency {latency:>4g} s: {res['episodes']} episodes ({res['ok']} ok), "
            f"{res['model_turns']} turns, {res['tool_calls']} calls; slot utilization "
            f"{res['utilization']:.2f} (before the tail {res['utilization_before_tail']:.2f}), "
            f"{res['episodes_per_replica_hour_held']:,.0f} episodes per replica-hour held; "
            f"bound: {res['bound']} [simulated engine; {res['wall_s']} s real]",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0 if all(r["ok"] == r["episodes"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

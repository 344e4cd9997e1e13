"""A simulated GPU engine: an OpenAI-compatible server whose timing is continuous batching.

For measuring how busy engines are kept (benchmarks/bench_fleet.py) on a machine without a GPU.
Every figure it produces is simulated, and says so. One replica:

    with SimEngine(SimSettings(max_num_seqs=64, time_scale=60)) as sim:
        sim.base_url        # http://127.0.0.1:PORT/v1, model "sim-model"
        sim.stats()         # busy slot-seconds, tokens, requests, peak batch, ...

N replicas, each its own process on a free port, their URLs written to an endpoints file
(`{"endpoints": ["http://127.0.0.1:PORT/v1", ...]}`, what `engine.endpoints_file` reads):

    python -m rewardprof.testing.sim_engine --replicas 4 --max-num-seqs 64 --time-scale 60 \\
        --endpoints-file results/fleet/endpoints.json

- Timing: `rewardprof.testing.sim_batching.BatchModel` in simulated seconds; `time_scale`
  simulated seconds pass per real second (60: a simulated GPU-hour takes a real minute).
  A reply is sent when the last of its `n` sequences is out.
- Completions: `The answer is \\boxed{X}` after a simulated reasoning of L tokens; L and
  whether X is right are functions of (prompt, seed + j) for choice j (as vLLM's seeds), so a
  rerun gives identical completions and rewards. The right answer is the `answers` entry whose
  key the prompt contains, else the sum of the prompt's last `a + b`; a wrong one is the right
  one + 1. A sample longer than `max_tokens` is cut there (finish_reason `length`, no answer).
  `usage` carries the simulated token counts. With `tool_turns`, a request offering tools and
  holding fewer assistant turns is answered with a call of its first tool instead (an agent).
- Admission: with `max_waiting`, a request that would queue more sequences than that is
  answered 503 with `Retry-After: 1` (the client retries it); without, it queues.
- `load_s`: simulated model load; /health answers 503 until it has passed.
- Endpoints: /health, /v1/models, /v1/chat/completions (n, seed, max_tokens, usage,
  return_token_ids), /metrics (Prometheus text, vLLM's gauge names), /sim/stats (JSON).
  With `stats_path`, the stats are also written there (atomically, at most once a second while
  busy, and at stop).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web

from rewardprof.engine.host import die_with_parent, http_get_json
from rewardprof.testing import openai_http as oai
from rewardprof.testing.openai_http import BackgroundServer, chat_completion, request_prompt
from rewardprof.testing.sim_batching import BatchModel, LengthModel, solves

_SUM = re.compile(r"(-?\d+)\s*\+\s*(-?\d+)")


@dataclass
class SimSettings:
    model_names: tuple[str, ...] = ("sim-model",)
    max_num_seqs: int = 64
    step_base_s: float = 0.015
    step_per_seq_s: float = 0.0003
    max_waiting: int | None = None
    time_scale: float = 60.0
    load_s: float = 0.0
    lengths: LengthModel = field(default_factory=LengthModel)
    answers: dict[str, str] = field(default_factory=dict)
    stats_path: Path | None = None
    tool_turns: int = 0

    def batch_model(self) -> BatchModel:
        return BatchModel(
            self.max_num_seqs, self.step_base_s, self.step_per_seq_s, self.max_waiting
        )


def right_answer(prompt: str, answers: dict[str, str]) -> str | None:
    for key, answer in answers.items():
        if key in prompt:
            return answer
    found = _SUM.findall(prompt)
    return str(int(found[-1][0]) + int(found[-1][1])) if found else None


def completion_text(prompt: str, seed: int | None, tokens: int, answers: dict) -> str:
    shown = right = right_answer(prompt, answers)
    if right is None or not solves(prompt, seed):
        shown = str(int(right) + 1) if right and right.lstrip("-").isdigit() else "?"
    return f"(simulated reasoning: {tokens} tokens) The answer is \\boxed{{{shown}}}."


class SimEngine(BackgroundServer):
    handler_cancellation = True  # a client gone: its request is aborted, as vLLM does

    def __init__(self, settings: SimSettings | None = None, host: str = "127.0.0.1", port=0):
        super().__init__(host, port)
        self.settings = settings or SimSettings()
        self.model = self.settings.batch_model()
        self.counts = {"requests": 0, "rejected": 0, "choices": 0, "truncated": 0}
        self.first_busy_at: float | None = None  # simulated seconds
        self._t0 = time.monotonic()
        self._t0_unix = time.time()
        self._stopped_unix: float | None = None  # the engine released (its GPUs given back)
        self._pending: dict[int, list] = {}  # request id -> [sequences left, future]
        self._ids = itertools.count()
        self._wake: asyncio.Event | None = None
        self._written = 0.0
        self.ready_when = lambda: True  # e.g. the vLLM stand-in's head: all nodes joined

    # ---- clock -------------------------------------------------------------------------------
    def sim_now(self) -> float:
        return (time.monotonic() - self._t0) * self.settings.time_scale

    def unix_at(self, sim_s: float | None) -> float | None:
        return None if sim_s is None else self._t0_unix + sim_s / self.settings.time_scale

    # ---- server ------------------------------------------------------------------------------
    def on_loop(self) -> None:
        self._wake = asyncio.Event()
        asyncio.get_event_loop().create_task(self._schedule())

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/sim/stats", self._stats)

    def stop(self) -> None:
        if self.closing is not None:  # the scheduler ends before the loop does
            self.call_in_loop(self.closing.set)
            self.call_in_loop(self._wake.set)
        super().stop()
        self._stopped_unix = time.time()
        self.write_stats()

    @property
    def loaded(self) -> bool:
        return self.sim_now() >= self.settings.load_s and self.ready_when()

    async def _health(self, request: web.Request) -> web.Response:
        if self.loaded:
            return web.Response()  # as vLLM: 200 with an empty body
        return web.Response(text="loading the (simulated) model", status=503)

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": name, "object": "model"} for name in self.settings.model_names]
        return web.json_response({"object": "list", "data": data})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response(self.stats())

    async def _metrics(self, request: web.Request) -> web.Response:
        s = self.stats()
        lines = [
            f"vllm:num_requests_running {s['running']}",
            f"vllm:num_requests_waiting {s['waiting']}",
            f"vllm:generation_tokens_total {s['tokens']:.0f}",
            f"rewardprof_sim_busy_slot_seconds_total {s['busy_slot_s']:.3f}",
            f"rewardprof_sim_seconds {s['sim_now_s']:.3f}",
        ]
        return web.Response(text="\n".join(lines) + "\n")

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        s = self.settings
        if not self.loaded:
            return web.json_response({"error": {"message": "loading"}}, status=503)
        if body.get("model") not in s.model_names:
            message = f"model {body.get('model')!r} does not exist"
            return web.json_response({"error": {"message": message}}, status=404)
        n, seed = int(body.get("n") or 1), body.get("seed")
        prompt, max_tokens = request_prompt(body), body.get("max_tokens")
        seeds = [None if seed is None else seed + j for j in range(n)]
        lengths = [s.lengths.length(prompt, sj) for sj in seeds]
        emitted = [min(length, max_tokens) if max_tokens else length for length in lengths]
        rid = next(self._ids)
        now = self.sim_now()
        if not self.model.submit(now, [((rid, j), t) for j, t in enumerate(emitted)]):
            self.counts["rejected"] += 1
            error = {"error": {"message": "simulated engine queue full"}}
            return web.json_response(error, status=503, headers={"Retry-After": "1"})
        self.counts["requests"] += 1
        if self.first_busy_at is None:
            self.first_busy_at = now
        done = asyncio.get_running_loop().create_future()
        self._pending[rid] = [n, done]
        self._deliver()
        self._wake.set()
        try:
            await done
        finally:
            self._pending.pop(rid, None)
            if done.cancelled() or not done.done():  # the client went away: vLLM aborts it
                self.model.abort(self.sim_now(), rid)
                self._wake.set()
        choices = []
        for sj, length, out in zip(seeds, lengths, emitted, strict=True):
            if out < length:
                self.counts["truncated"] += 1
                choices.append(("(simulated reasoning, cut off)", "length", out))
            else:
                choices.append((completion_text(prompt, sj, out, s.answers), "stop", out))
        self.counts["choices"] += n
        ids = bool(body.get("return_token_ids"))
        reply = chat_completion(body["model"], choices, len(prompt.split()), ids)
        turns = sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant")
        if body.get("tools") and turns < s.tool_turns:  # an agent's turn: a call, not the answer
            oai.call_first_tool(reply, body["tools"][0]["function"]["name"], f"{rid}_{turns}")
        return web.json_response(reply)

    # ---- the batch ---------------------------------------------------------------------------
    def _deliver(self) -> None:
        for rid, _ in self.model.drain():
            entry = self._pending.get(rid)
            if entry is None:
                continue  # its handler ended (aborted or shut down)
            entry[0] -= 1
            if entry[0] == 0 and not entry[1].done():
                entry[1].set_result(None)

    async def _schedule(self) -> None:
        while not self.closing.is_set():
            self.model.advance(self.sim_now())
            self._deliver()
            if self.model.running and time.monotonic() - self._written > 1.0:
                self.write_stats()
            nxt = self.model.next_event()
            scale = self.settings.time_scale
            real = 0.5 if nxt is None else max(0.0, (nxt - self.model.now) / scale)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):  # the next sequence finishes: run again
                await asyncio.wait_for(self._wake.wait(), min(real, 0.5))

    # ---- what it measured --------------------------------------------------------------------
    def stats(self) -> dict:
        m, s = self.model, self.settings
        elapsed = max(m.now, 1e-9)
        return {
            "simulated": True,
            "model": list(s.model_names),
            "max_num_seqs": s.max_num_seqs,
            "time_scale": s.time_scale,
            "started_unix": self._t0_unix,
            "stopped_unix": self._stopped_unix,
            "load_s": s.load_s,
            "sim_now_s": m.now,
            "busy_slot_s": m.busy_slot_s,
            "slot_utilization": m.busy_slot_s / (s.max_num_seqs * elapsed),
            "tokens": m.tokens,
            "sequences": m.sequences_done,
            "running": m.running,
            "waiting": m.waiting,
            "peak_running": m.peak_running,
            "peak_waiting": m.peak_waiting,
            "peak_in_system": m.peak_in_system,
            "first_busy_unix": self.unix_at(self.first_busy_at),
            "last_idle_unix": self.unix_at(m.last_idle_at),
            "last_submit_unix": self.unix_at(m.last_submit_at),
            "busy_at_last_submit": m.busy_at_last_submit,
            "aborted_sequences": m.aborted_sequences,
            "aborted_slot_s": m.aborted_slot_s,
            "bucket_s": m.bucket_s,
            "busy_buckets": [round(b, 3) for b in m.busy_buckets],
            **self.counts,
        }

    def write_stats(self) -> None:
        path = self.settings.stats_path
        if path is None:
            return
        self._written = time.monotonic()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.stats()))
        os.replace(tmp, path)


# ---- command line ----------------------------------------------------------------------------
def add_sim_options(p: argparse.ArgumentParser) -> None:
    """The simulation's own options (also read from $REWARDPROF_SIM_ARGS by the vLLM stand-in)."""
    p.add_argument("--time-scale", type=float, default=60.0, help="simulated s per real s")
    p.add_argument("--step-base-s", type=float, default=0.015, help="step time at batch 0")
    p.add_argument("--step-per-seq-s", type=float, default=0.0003, help="+ this per sequence")
    p.add_argument("--median-tokens", type=float, default=600.0)
    p.add_argument("--sigma", type=float, default=1.0, help="log-normal sigma of lengths")
    p.add_argument(
        "--length-factor",
        action="append",
        default=[],
        metavar="TEXT=F",
        help="prompts containing TEXT generate F times longer (repeatable; first match wins)",
    )
    p.add_argument("--max-waiting", type=int, help="queue cap in sequences (past it: 503)")
    p.add_argument("--load-s", type=float, default=0.0, help="simulated model load time")
    p.add_argument("--answers", help="JSON file: {prompt substring: right answer}")
    p.add_argument("--stats-dir", help="write each replica's stats JSON here")


def settings_from(args: argparse.Namespace, names: tuple[str, ...], seqs: int) -> SimSettings:
    factors = []
    for rule in args.length_factor:
        text, _, factor = rule.rpartition("=")
        if not text:
            raise SystemExit(f"--length-factor {rule!r}: expected TEXT=FACTOR")
        factors.append((text, float(factor)))
    answers = json.loads(Path(args.answers).read_text()) if args.answers else {}
    return SimSettings(
        model_names=names,
        max_num_seqs=seqs,
        step_base_s=args.step_base_s,
        step_per_seq_s=args.step_per_seq_s,
        max_waiting=args.max_waiting,
        time_scale=args.time_scale,
        load_s=args.load_s,
        lengths=LengthModel(args.median_tokens, args.sigma, tuple(factors)),
        answers=answers,
    )


def serve_until_signal(sim: SimEngine, announce: str = "") -> None:
    """Serve until SIGTERM/SIGINT, then stop (writing the stats)."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sim.start()
    print(announce or f"serving {sim.base_url}", flush=True)
    stop.wait()
    sim.stop()


def _spawn_replicas(args: argparse.Namespace, argv: list[str]) -> list[tuple]:
    procs = []
    for i in range(args.replicas):
        child = [sys.executable, "-m", "rewardprof.testing.sim_engine", "--one", str(i), *argv]
        proc = subprocess.Popen(
            child, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent
        )
        line = proc.stdout.readline().strip()
        if not line.startswith("serving "):
            proc.kill()
            raise SystemExit(f"replica {i} did not start: {line!r}")
        procs.append((proc, line.split()[1]))
    return procs


def _wait_loaded(base_url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while http_get_json(base_url.removesuffix("/v1") + "/health", timeout=2)[0] != 200:
        if time.monotonic() > deadline:
            raise SystemExit(f"{base_url}: /health not 200 after {timeout_s:.0f} s")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--replicas", type=int, default=1)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--model", default="sim-model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--endpoints-file", help="write {'endpoints': [url, ...]} here when ready")
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a replica process (its index)
    add_sim_options(p)
    args = p.parse_args(argv)
    settings = settings_from(args, (args.model,), args.max_num_seqs)
    if args.one is not None:
        if args.stats_dir:
            settings.stats_path = Path(args.stats_dir) / f"replica-{args.one}.json"
        serve_until_signal(SimEngine(settings, args.host))
        return
    procs = _spawn_replicas(args, argv)
    urls = [url for _, url in procs]
    for url in urls:  # published once loaded, as `rewardprof fleet` publishes a healthy replica
        _wait_loaded(url, args.load_s / args.time_scale + 60)
    if args.endpoints_file:
        out = Path(args.endpoints_file)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp")
        caps = dict.fromkeys(urls, args.max_num_seqs)  # what a fleet publishes
        tmp.write_text(json.dumps({"endpoints": urls, "capacity": caps}, indent=1) + "\n")
        os.replace(tmp, out)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"serving {len(urls)} simulated replicas: {' '.join(urls)}", flush=True)
    while not stop.wait(1.0):
        pass  # a replica that dies (a test kills one) leaves the others serving
    for proc, _ in procs:
        proc.terminate()
    for proc, _ in procs:
        proc.wait(10)


if __name__ == "__main__":
    main()

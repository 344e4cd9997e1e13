"""Host-level helpers of serve mode: ports, processes, signals and a plain HTTP probe.

Nothing here knows vLLM; rewardprof.engine.server composes them into the server's lifecycle.
Linux-specific pieces (/proc, prctl) degrade to no-ops elsewhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    """No one listens there (connections in TIME_WAIT don't count, as for vLLM's own bind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def processes_with_env(entry: str) -> list[int]:
    """Pids, other than this process, whose environment holds `entry` ('NAME=value'), from
    Linux /proc (processes of other users are unreadable and skipped)."""
    needle = entry.encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:  # gone meanwhile, or not ours
            continue
    return pids


def describe_processes(pids: list[int]) -> str:
    """'pid (state S, parent P): command' per pid, from /proc: what a leftover process was doing
    (D: blocked in the kernel, Z: exited but not reaped)."""
    out = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            state, ppid = stat.rsplit(")", 1)[1].split()[:2]
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:160]
        except OSError:
            out.append(f"{pid} (gone)")
            continue
        out.append(f"{pid} (state {state}, parent {ppid}): {cmd.strip()}")
    return "; ".join(out)


try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl  # loaded here, not after fork
except (OSError, AttributeError):  # not Linux
    _PRCTL = None


def die_with_parent() -> None:
    """A `preexec_fn`: runs in the child between fork and exec."""
    if _PRCTL is not None:
        _PRCTL(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG: SIGTERM when the job dies


def http_get_json(url: str, timeout: float = 3.0) -> tuple[int, object]:
    """(HTTP status, parsed body or None); status 0 when nothing answered. No proxies: the
    server is local to the job."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            body = resp.read()
            return resp.status, (json.loads(body) if body.strip() else None)
    except urllib.error.HTTPError as exc:
        return exc.code, None
    except (OSError, ValueError):
        return 0, None


def served_models(root: str) -> set | None:
    """The model ids a local OpenAI-compatible server at `root` lists, once its /health
    answers 200; None while it is not up (vLLM answers /v1/models only after loading)."""
    status, _ = http_get_json(root + "/health")
    if status != 200:
        return None
    status, body = http_get_json(root + "/v1/models")
    data = body.get("data", []) if status == 200 and isinstance(body, dict) else []
    return {m.get("id") for m in data if isinstance(m, dict)}


@contextlib.contextmanager
def job_signals_raise() -> Iterator[None]:
    """SIGTERM to the job becomes SystemExit(143), so `finally` blocks stop the server; SIGINT
    raises KeyboardInterrupt even where the job inherited it ignored.

    The server's watchdog interrupts the main thread with SIGINT when the server dies. A job
    started in the background by a non-interactive shell (`snakemake ... &`, nohup, a batch
    script) inherits SIGINT as ignored, and Python then installs no handler: the interrupt
    would be lost and the job would wait out its run against a dead server."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise SystemExit(128 + signum)

    previous_term = signal.signal(signal.SIGTERM, handler)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)

"""The stage commands of a test's Snakemake run, forked from a server that imported rewardprof
once: each Snakemake job starts one `rewardprof <stage>` process, ~0.5-1.5 s of CPU in imports
(pandas, pyarrow, aiohttp, the config models) before it does anything, some 800 of them a suite
on a 2-core machine where the suite's time is its CPU. harness/preloaded.py does the same for
Snakemake itself.

`job_env()` gives a run's environment a PATH whose first `rewardprof` is the shim
(harness/stage_shim.py) and the server's socket. Per command the server forks a handler, the
handler forks the command: its own process group, the shim's stdin, stdout and stderr, working
directory, environment and umask, `sys.argv` as the console script's, `rewardprof.cli.main`
run as the console script runs it. The handler tells the shim the command's pid (the shim
sends it the signals it gets) and how it ended (the shim ends the same way: its exit code, or
killed by its signal); if the shim is killed first, the handler kills the command's process
group. The command's CPU, and that of the processes it waited for, is appended to a file that
harness/cpu_report.py adds to the test's figure.

What differs from a new interpreter, and why it does not matter to the runs that use it: the
command's parent is the handler, not the job's shell (no rewardprof code reads its parent); its
modules were imported before its environment was set (rewardprof reads the environment when
it runs, not at import); every command of one pytest worker shares the server's hash seed (the
reproducibility test's first run has new interpreters, `snakemake(..., stage_server=False)`, and
the others must give its outputs; a run whose environment sets a PYTHON* variable has them
too)."""

from __future__ import annotations

import atexit
import importlib
import json
import os
import pkgutil
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

HARNESS = Path(__file__).resolve().parent
SOCKET_ENV = "REWARDPROF_STAGE_SERVER"
PRELOAD = ("rewardprof.cli", "rewardprof.stages", "rewardprof.core.config")
_started: dict[str, Path] = {}  # this process's server: its directory


# ---- in the test process ---------------------------------------------------------------------


def job_env(path: str) -> dict[str, str]:
    """PATH (`path`, the shim's directory first) and the socket, for a run's environment; the
    server starts on the first call in this process."""
    if "dir" not in _started:
        _started["dir"] = _start()
    tmp = _started["dir"]
    return {"PATH": f"{tmp / 'bin'}:{path}", SOCKET_ENV: str(tmp / "socket")}


def cpu_s() -> float:
    """CPU seconds of the commands this process's server ran so far."""
    return sum(float(x) for x in _counted())


def commands_run() -> int:
    """How many commands this process's server ran so far (a CPU line each)."""
    return len(_counted())


def _counted() -> list[str]:
    cpu = _started.get("dir", Path("/nonexistent")) / "cpu"
    return cpu.read_text().split() if cpu.exists() else []


def _start() -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="stage-server-"))
    (tmp / "bin").mkdir()
    real = Path(sys.executable).parent / "rewardprof"
    shim = tmp / "bin" / "rewardprof"
    shim.write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -S -E "{HARNESS / "stage_shim.py"}" "{real}" "$@"\n'
    )
    shim.chmod(0o755)
    code = (
        f"import sys; sys.path.insert(0, {str(HARNESS)!r}); import stage_server; "
        f"stage_server.serve({str(tmp)!r}, {os.getpid()})"
    )
    with (tmp / "server.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-P", "-c", code],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=tmp, start_new_session=True,
        )  # fmt: skip
    atexit.register(_stop, proc, tmp)
    deadline = time.monotonic() + 120
    while not (tmp / "socket").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"stage server did not start: {(tmp / 'server.log').read_text()}")
        time.sleep(0.05)
    return tmp


def _stop(proc: subprocess.Popen, tmp: Path) -> None:
    proc.kill()
    proc.wait()
    shutil.rmtree(tmp, ignore_errors=True)


# ---- the server ------------------------------------------------------------------------------


def _preload() -> None:
    for name in PRELOAD:
        module = importlib.import_module(name)
        for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
            importlib.import_module(info.name)


def serve(directory: str, owner: int) -> None:
    """Accept commands on `directory`/socket until the test process `owner` is gone."""
    _preload()
    sys.path.remove(str(HARNESS))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(directory, "socket.tmp"))
    listener.listen(128)
    os.rename(os.path.join(directory, "socket.tmp"), os.path.join(directory, "socket"))
    listener.settimeout(5)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the handlers are reaped by the kernel
    while os.getppid() == owner:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _handle(conn, os.path.join(directory, "cpu"))
            finally:
                os._exit(0)
        conn.close()


def _recv_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError("the shim closed before its request was whole")
        data += chunk
    return data


def _handle(conn: socket.socket, cpu_file: str) -> None:
    conn.setblocking(True)
    header, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
    header += _recv_exact(conn, 4 - len(header))
    request = json.loads(_recv_exact(conn, struct.unpack("!I", header)[0]))
    pid = os.fork()
    if pid == 0:
        conn.close()
        _run_command(request, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    pidfd, watched = os.pidfd_open(pid), [conn]
    while True:
        ready, _, _ = select.select([*watched, pidfd], [], [])
        if pidfd in ready:
            break
        if not conn.recv(1):  # the shim is gone (killed): so is the command
            watched = []
            os.killpg(pid, signal.SIGKILL)
    _, status, usage = os.wait4(pid, 0)
    with open(cpu_file, "a") as f:
        f.write(f"{usage.ru_utime + usage.ru_stime}\n")
    if watched:  # a shim that is gone needs no status
        conn.sendall(json.dumps({"status": status}).encode() + b"\n")


def _run_command(request: dict, fds: list[int]) -> None:
    """The command, as the console script runs it, in this (forked) process; never returns."""
    os.setpgid(0, 0)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = request["argv"]
    sys.path.insert(0, os.path.dirname(sys.argv[0]))  # the console script's own directory
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    from rewardprof.cli import main  # lazy: preloaded by the server, so nothing is imported here

    code: int | str | None = 1
    try:
        code = main()
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:  # as an interpreter ends on one: killed by SIGINT
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:  # as an interpreter ends on an uncaught exception
        traceback.print_exc()
    finally:
        atexit._run_exitfuncs()
        if isinstance(code, str):
            print(code, file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code if isinstance(code, int) else (0 if code is None else 1))

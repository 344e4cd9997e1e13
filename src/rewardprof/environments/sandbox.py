"""Run one untrusted Python program once, contained; the test logic is in code_harness.py.

Two mechanisms, named in every result's `sandbox["mechanism"]`:
- `bubblewrap` (preferred; Debian package `bubblewrap`): the program sees only /usr, the
  interpreter and its standard library, its own /proc and a size-limited scratch tmpfs, in new
  network, PID, IPC and UTS namespaces (sandbox_bwrap.py); inside, the launcher sets rlimits,
  drops to a throwaway uid and execs the program, which is PID 1: when it exits, the kernel
  kills every process it left.
- `launcher` (the fallback when bwrap is missing or cannot create namespaces here): the
  launcher alone (_sandbox_launcher.py). As root: a network namespace, every mount read-only,
  the scratch directory a size-limited tmpfs, rlimits, the throwaway uid, and afterwards
  `kill -1` as that uid. It does NOT hide the filesystem (the project, the run directory and
  /proc stay readable) nor host Unix sockets. Without root: only the rlimits and a timeout.

Both: a wall-clock timeout (SIGKILL), stdout and stderr to files capped by RLIMIT_FSIZE, and a
parent-death SIGKILL so nothing outlives the verification worker (sandbox_cleanup.py).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardprof.core.errors import RewardprofError
from rewardprof.environments import sandbox_cleanup
from rewardprof.environments.sandbox_bwrap import (
    SANDBOX_PROGRAM,
    SANDBOX_SCRATCH,
    bwrap_argv,
    bwrap_works,
)

LAUNCHER = (Path(__file__).with_name("_sandbox_launcher.py")).read_text()
MECHANISMS = ("auto", "bubblewrap", "launcher")
_counter = itertools.count()
_lock = threading.Lock()


class SandboxError(RewardprofError, RuntimeError):
    """The sandbox itself could not run the program (not the program's fault)."""


@dataclass
class Limits:
    timeout_s: float = 5.0  # wall clock per test
    cpu_s: int = 5  # CPU seconds per test (RLIMIT_CPU)
    memory_mb: int = 512  # address space (RLIMIT_AS)
    max_output_bytes: int = 1 << 20  # stdout/stderr and any file written (RLIMIT_FSIZE)
    scratch_mb: int = 64  # size of the scratch tmpfs (the program's working directory)
    nproc: int = 32  # processes/threads of the sandbox uid (RLIMIT_NPROC)
    isolate: bool = True  # the fallback's network + mount namespaces when root
    sandbox: str = "auto"  # auto | bubblewrap | launcher
    python: str | None = None  # interpreter for the program; default: this one's base


@dataclass
class RunResult:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    sandbox: dict[str, Any]


def _usable_by_others(path: str) -> bool:
    p = Path(os.path.realpath(path))
    try:
        if not (p.stat().st_mode & stat.S_IXOTH):
            return False
        return all(d.stat().st_mode & stat.S_IXOTH for d in p.parents)
    except OSError:
        return False


def sandbox_python(limits: Limits, mechanism: str) -> str:
    if limits.python:
        return limits.python
    base = getattr(sys, "_base_executable", None) or sys.executable
    if mechanism == "bubblewrap" or os.getuid() != 0:
        return os.path.realpath(base)  # bwrap binds it with traversable parents
    for cand in (base, sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if cand and os.path.exists(cand) and _usable_by_others(cand):
            return cand
    raise SandboxError(
        "no Python interpreter the unprivileged sandbox user can execute; "
        "set the code environment's `python` option"
    )


def choose_mechanism(limits: Limits) -> str:
    """bubblewrap when it works here (or SandboxError if asked for and it does not)."""
    if limits.sandbox not in MECHANISMS:
        raise SandboxError(f"sandbox: {limits.sandbox!r} is not one of {', '.join(MECHANISMS)}")
    if limits.sandbox == "launcher":
        return "launcher"
    why_not = bwrap_works(sandbox_python(limits, "bubblewrap"))
    if why_not is None:
        return "bubblewrap"
    if limits.sandbox == "bubblewrap":
        raise SandboxError(f"sandbox: bubblewrap was asked for, but {why_not}")
    return "launcher"


def new_uid() -> int:
    """A throwaway uid from this worker's range (sandbox_cleanup.worker_uids)."""
    if os.getuid() != 0:
        return os.getuid()
    with _lock:
        return sandbox_cleanup.worker_uids(os.getpid())[next(_counter) % 64]


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid` (as that uid, so nothing else can be hit)."""
    cfg = json.dumps({"mode": "kill", "uid": uid, "status_fd": 2})
    subprocess.run(
        [sys.executable, "-I", "-S", "-c", LAUNCHER, cfg],
        timeout=30,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )


def _read_capped(path: Path, cap: int) -> str:
    with path.open("rb") as f:
        return f.read(cap).decode("utf-8", "replace")


def run_program(
    program: str,
    stdin: str,
    limits: Limits,
    workdir: Path,
    mechanism: str,
    *,
    runner: tuple[str, dict[str, Any]] | None = None,
    pass_fds: tuple[int, ...] = (),
    during: Callable[[float], dict[str, Any]] | None = None,
) -> tuple[RunResult, dict[str, Any]]:
    """Run `program` once in the sandbox; never raises for the program's faults.

    Plain: `python -I main.py` with `stdin`. With `runner` (its source text and config), that
    script runs instead, with the program's path added to its config as "program" and
    `pass_fds` kept open for it; `during(deadline)` then runs while it does (the harness's
    side of the conversation) and its answer is returned next to the RunResult. The caller's
    copies of `pass_fds` are closed here once the sandbox has them.
    """
    uid = new_uid()
    (workdir / "main.py").write_text(program)
    (workdir / "stdin").write_text(stdin)
    python = sandbox_python(limits, mechanism)
    if mechanism == "bubblewrap":
        program_path, scratch = SANDBOX_PROGRAM, SANDBOX_SCRATCH
    else:
        program_path, scratch = str(workdir / "main.py"), str(workdir / "scratch")
        (workdir / "scratch").mkdir()
        if os.getuid() == 0:
            os.chown(workdir / "scratch", uid, uid)
            (workdir / "scratch").chmod(0o700)
    argv = [python, "-I", program_path]
    if runner is not None:
        source, config = runner
        argv = [python, "-I", "-c", source, json.dumps({**config, "program": program_path})]
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": scratch,
        "TMPDIR": scratch,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    view: list[str] = []  # bwrap's options, built before any fd is opened here
    if mechanism == "bubblewrap":
        view = bwrap_argv(python, workdir / "main.py", limits.scratch_mb << 20, [])
    status_r, status_w = os.pipe()
    cfg = {
        "mode": "run",
        "uid": uid,
        "status_fd": status_w,
        "scratch": scratch,
        "contain": limits.isolate and mechanism == "launcher",
        "pid_namespace": limits.isolate or mechanism == "bubblewrap",
        "scratch_bytes": limits.scratch_mb << 20,
        "cpu_s": limits.cpu_s,
        "memory_mb": limits.memory_mb,
        "max_output_bytes": limits.max_output_bytes,
        "nproc": limits.nproc,
        "argv": argv,
        "env": env,
    }
    if mechanism == "bubblewrap":
        cmd = [*view, python, "-I", "-S", "-c", LAUNCHER, json.dumps(cfg)]
        cwd = str(workdir)
    else:
        cmd = [sys.executable, "-I", "-S", "-c", LAUNCHER, json.dumps(cfg)]
        cwd = scratch
    out_path, err_path = workdir / "stdout", workdir / "stderr"
    timed_out = False
    talk: dict[str, Any] = {}
    proc: subprocess.Popen | None = None
    started = False  # once it is, the child's ends of the pipes are closed here
    start = time.monotonic()
    try:
        with (
            open(workdir / "stdin", "rb") as fin,
            open(out_path, "wb") as fout,
            open(err_path, "wb") as ferr,
        ):
            proc = subprocess.Popen(
                cmd,
                stdin=fin,
                stdout=fout,
                stderr=ferr,
                pass_fds=(status_w, *pass_fds),
                start_new_session=True,
                cwd=cwd,
                env=env,
            )
        started = True
        for fd in (status_w, *pass_fds):  # the sandbox has its own copies now
            os.close(fd)
        deadline = start + limits.timeout_s
        if during is not None:
            talk = during(deadline)
        if talk.get("stop"):  # the harness has seen enough (a forged or broken message)
            deadline = time.monotonic()
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # bwrap: its sandbox dies with it
            proc.wait()
        wall = time.monotonic() - start
        with os.fdopen(status_r, "rb") as f:
            status_r = -1
            status_lines = f.read().decode().splitlines()
    finally:
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for fd in (status_r,) if started else (status_r, status_w, *pass_fds):
            if fd >= 0:
                os.close(fd)
        # What the program left running: gone with bwrap's PID namespace; the fallback kills
        # by uid (or process group without root).
        if mechanism == "launcher" and uid != os.getuid():
            kill_uid(uid)
        elif mechanism == "launcher" and proc is not None:
            with contextlib.suppress(ProcessLookupError):  # the group is already gone
                os.killpg(proc.pid, signal.SIGKILL)
    status: dict[str, Any] = {}
    for line in status_lines:  # the containment report, then an error if exec itself failed
        status.update(json.loads(line))
    if "error" in status:
        raise SandboxError(f"sandbox setup failed: {status['error']}")
    if not status:
        rc = proc.returncode if proc is not None else None
        err = _read_capped(err_path, 300).strip()
        raise SandboxError(f"sandbox did not start the program (exit {rc}): {err}")
    if mechanism == "bubblewrap":  # what bwrap built, on top of the launcher's report
        status.update(net_isolated=True, fs_readonly=True, fs_hidden=True, scratch_quota=True)
    status["mechanism"] = mechanism
    # how the program itself ended, as the launcher saw it (bwrap's own exit code turns a
    # signal into 128 + n); else the process we started is the program
    returncode = status.pop("program_exit", proc.returncode)
    cap = limits.max_output_bytes
    result = RunResult(
        returncode,
        _read_capped(out_path, cap),
        _read_capped(err_path, cap),
        timed_out,
        round(wall, 3),
        status,
    )
    return result, talk


__all__ = ["Limits", "RunResult", "SandboxError", "choose_mechanism", "run_program"]

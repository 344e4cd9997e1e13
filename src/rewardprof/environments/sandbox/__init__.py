"""Run one untrusted Python program once, contained (the code tests: code/harness.py).

Two mechanisms, named in every result's `sandbox["mechanism"]`:
- `bubblewrap` (preferred; Debian package `bubblewrap`): the program sees only /usr, the
  interpreter and its standard library, its own /proc and a size-limited scratch tmpfs, in new
  network, PID, IPC and UTS namespaces (bwrap.py); inside, the launcher sets rlimits,
  drops to a throwaway uid and execs the program, which is PID 1: when it exits, the kernel
  kills every process it left.
- `launcher` (the fallback when bwrap is missing or cannot create namespaces here): the
  launcher alone (_launcher.py). As root: a network namespace, every mount read-only,
  the scratch directory a size-limited tmpfs, rlimits, the throwaway uid, and afterwards
  `kill -1` as that uid. It does NOT hide the filesystem (the project, the run directory and
  /proc stay readable) nor host Unix sockets. Without root: only the rlimits and a timeout.

Both (mechanisms.py puts them behind one interface, `Sandbox`): a wall-clock timeout
(SIGKILL), stdout and stderr to files capped by RLIMIT_FSIZE, a parent-death SIGKILL so nothing
outlives the verification worker (cleanup.py), and `memory_mb` for the whole sandbox
(a memory cgroup per run where the machine has one, memory.py; else per process).
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
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardprof.core.errors import RewardprofError
from rewardprof.environments.sandbox import cleanup
from rewardprof.environments.sandbox.bwrap import bwrap_works
from rewardprof.environments.sandbox.mechanisms import (
    Sandbox,
    kill_uid,
    launcher_command,
    sandbox_for,
)
from rewardprof.environments.sandbox.memory import MemoryCgroup

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
    # directories the program may import from, read-only (a tool's numpy): bound at their own
    # paths by bubblewrap; the launcher leaves the filesystem as it is
    packages: tuple[str, ...] = ()


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
    """A throwaway uid from this worker's range (cleanup.worker_uids)."""
    if os.getuid() != 0:
        return os.getuid()
    with _lock:
        return cleanup.worker_uids(os.getpid())[next(_counter) % 64]


def _read_capped(path: Path, cap: int) -> str:
    with path.open("rb") as f:
        return f.read(cap).decode("utf-8", "replace")


def _supervise(
    cmd: list[str],
    cwd: str,
    env: dict[str, str],
    workdir: Path,
    child_fds: tuple[int, ...],
    during: Callable[[float], dict[str, Any]] | None,
    timeout_s: float,
) -> tuple[subprocess.Popen, bool, dict[str, Any]]:
    """Start `cmd` with `child_fds` kept open for it (closed here once it has them), let
    `during` talk to it, and wait for it until the deadline (then SIGKILL its group)."""
    timed_out, talk, proc = False, {}, None
    start = time.monotonic()
    try:
        with (
            open(workdir / "stdin", "rb") as fin,
            open(workdir / "stdout", "wb") as fout,
            open(workdir / "stderr", "wb") as ferr,
        ):
            proc = subprocess.Popen(
                cmd,
                stdin=fin,
                stdout=fout,
                stderr=ferr,
                pass_fds=child_fds,
                start_new_session=True,
                cwd=cwd,
                env=env,
            )
    finally:
        for fd in child_fds:  # the sandbox has its own copies now (or never will)
            os.close(fd)
    try:
        deadline = start + timeout_s
        if during is not None:
            talk = during(deadline)
        if talk.get("stop"):  # the harness has its verdict, or has seen a forged message
            deadline = time.monotonic()
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # bwrap: its sandbox dies with it
            proc.wait()
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc, timed_out, talk


def _launcher_report(status_r: int, proc: subprocess.Popen | None, err_path: Path) -> dict:
    """The launcher's containment report (SandboxError if the sandbox did not start)."""
    with os.fdopen(status_r, "rb") as f:
        lines = f.read().decode().splitlines()
    status: dict[str, Any] = {}
    for line in lines:  # the containment report, then an error if exec itself failed
        status.update(json.loads(line))
    if "error" in status:
        raise SandboxError(f"sandbox setup failed: {status['error']}")
    if not status:
        rc = proc.returncode if proc is not None else None
        err = _read_capped(err_path, 300).strip()
        raise SandboxError(f"sandbox did not start the program (exit {rc}): {err}")
    return status


def _program_env(scratch: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": scratch,
        "TMPDIR": scratch,
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


def _launcher_config(
    box: Sandbox, limits: Limits, uid: int, scratch: str, status_w: int, argv: list[str]
) -> dict[str, Any]:
    """What the launcher reads from its config pipe: who the program runs as, the rlimits
    it sets (_launcher.set_limits), the program's argv and environment."""
    return {
        "mode": "run",
        "uid": uid,
        "status_fd": status_w,
        "scratch": scratch,
        **box.launcher_options(limits.isolate),
        "scratch_bytes": limits.scratch_mb << 20,
        "cpu_s": limits.cpu_s,
        "memory_mb": limits.memory_mb,
        "max_output_bytes": limits.max_output_bytes,
        "nproc": limits.nproc,
        "argv": argv,
        "env": _program_env(scratch),
    }


def _program_argv(
    python: str, program_path: str, runner: tuple[str, dict[str, Any]] | None
) -> list[str]:
    """`python -I main.py`, or the runner's script with the program's path in its config."""
    if runner is None:
        return [python, "-I", program_path]
    source, config = runner
    return [python, "-I", "-c", source, json.dumps({**config, "program": program_path})]


def _wrapper(
    box: Sandbox, python: str, workdir: Path, limits: Limits, pass_fds: tuple[int, ...]
) -> tuple[list[str], str, str, MemoryCgroup | None]:
    """The mechanism's command around the launcher, and the run's memory cgroup (None: per
    process); the caller's `pass_fds` are closed if either cannot be had."""
    try:
        wrapper, launcher_python, cwd = box.command(
            python, workdir, limits.scratch_mb << 20, tuple(limits.packages)
        )
        return wrapper, launcher_python, cwd, MemoryCgroup.create(limits.memory_mb)
    except BaseException:
        for fd in pass_fds:
            os.close(fd)
        raise


def _result(
    status: dict[str, Any],
    proc: subprocess.Popen,
    timed_out: bool,
    wall: float,
    workdir: Path,
    cap: int,
) -> RunResult:
    # how the program itself ended, as the launcher saw it (bwrap's own exit code turns a
    # signal into 128 + n); else the process we started is the program
    returncode = status.pop("program_exit", proc.returncode)
    stdout, stderr = _read_capped(workdir / "stdout", cap), _read_capped(workdir / "stderr", cap)
    return RunResult(returncode, stdout, stderr, timed_out, round(wall, 3), status)


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
    box: Sandbox = sandbox_for(mechanism)
    uid = new_uid()
    (workdir / "main.py").write_text(program)
    (workdir / "stdin").write_text(stdin)
    python = sandbox_python(limits, mechanism)
    program_path, scratch = box.paths(workdir, uid)
    argv = _program_argv(python, program_path, runner)
    wrapper, launcher_python, cwd, cgroup = _wrapper(box, python, workdir, limits, pass_fds)
    status_r, status_w = os.pipe()
    cfg = _launcher_config(box, limits, uid, scratch, status_w, argv)
    launcher, cfg_fd = launcher_command(launcher_python, cfg)
    cmd = [*wrapper, *launcher]
    if cgroup is not None:  # its first process joins the cgroup, then execs the sandbox
        cmd = cgroup.joining(cmd)
    proc = None
    start = time.monotonic()
    try:
        proc, timed_out, talk = _supervise(
            cmd, cwd, cfg["env"], workdir, (status_w, cfg_fd, *pass_fds), during, limits.timeout_s
        )
        wall = time.monotonic() - start
        reading, status_r = status_r, -1  # _launcher_report closes it
        status = _launcher_report(reading, proc, workdir / "stderr")
    finally:
        if status_r >= 0:
            os.close(status_r)
        box.after(uid, proc)
        memory = cgroup.report() if cgroup is not None else {"memory_limit": "per_process"}
        if cgroup is not None:
            cgroup.remove()
    status.update(box.containment(), **memory, mechanism=mechanism)
    return _result(status, proc, timed_out, wall, workdir, limits.max_output_bytes), talk


def run_tool_call(
    program: str, request: dict[str, Any], limits: Limits, scratch_prefix: str
) -> RunResult:
    """One call of a tool whose program runs in a fresh sandbox (the Python tools of
    math_with_code and ns_tools): `request` as JSON on its stdin, with the directories it may
    import from (`limits.packages`) at their real paths, where bubblewrap binds them."""
    mechanism = choose_mechanism(limits)
    request = {**request, "packages": [os.path.realpath(p) for p in limits.packages]}
    workdir = Path(tempfile.mkdtemp(prefix=scratch_prefix))
    try:
        result, _ = run_program(program, json.dumps(request), limits, workdir, mechanism)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


__all__ = [
    "Limits",
    "RunResult",
    "SandboxError",
    "choose_mechanism",
    "kill_uid",
    "run_program",
    "run_tool_call",
]

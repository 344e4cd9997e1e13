"""Run untrusted Python programs against unit tests, contained (see _sandbox_launcher.py).

`run_tests` runs in a verification worker process (never on the event loop). Per test: a fresh
scratch directory owned by a throwaway uid, a launcher that contains the program (new network
and mount namespaces as root, rlimits, uid drop) and execs it, a wall-clock timeout, stdout and
stderr to files capped by RLIMIT_FSIZE, and afterwards SIGKILL to every process of that uid.

What is contained where (reported per run in extras["sandbox"]):
- as root on Linux (this project's machines): no network (fresh network namespace), no writes
  outside the scratch directory (every other mount read-only in a private mount namespace),
  a process-count limit that holds (own uid), CPU-time, address-space and file-size limits;
- without root: the rlimits only (CPU, memory, file size, a process limit counted against the
  user), a scratch working directory, a wall-clock timeout; network and the filesystem are NOT
  contained beyond the user's own permissions. Run code environments as root (or in a container)
  for untrusted code.
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rewardprof.core.errors import RewardprofError

LAUNCHER = (Path(__file__).with_name("_sandbox_launcher.py")).read_text()
_UID_BASE = 1_000_000
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
    nproc: int = 32  # processes/threads of the sandbox uid (RLIMIT_NPROC)
    isolate: bool = True  # network + mount namespaces when root
    python: str | None = None  # interpreter for the program; default: one the sandbox uid can run


def _usable_by_others(path: str) -> bool:
    p = Path(os.path.realpath(path))
    try:
        if not (p.stat().st_mode & stat.S_IXOTH):
            return False
        return all(d.stat().st_mode & stat.S_IXOTH for d in p.parents)
    except OSError:
        return False


def sandbox_python(limits: Limits) -> str:
    if limits.python:
        return limits.python
    if os.getuid() != 0:
        return sys.executable
    base = getattr(sys, "_base_executable", None) or sys.executable
    for cand in (base, sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if cand and os.path.exists(cand) and _usable_by_others(cand):
            return cand
    raise SandboxError(
        "no Python interpreter the unprivileged sandbox user can execute; "
        "set the code environment's `python` option"
    )


def _new_uid() -> int:
    with _lock:
        return _UID_BASE + os.getpid() * 64 + next(_counter) % 64


@dataclass
class RunResult:
    returncode: int | None
    stdout: str
    stderr: str
    outcome: str  # ok | timeout | memory_limit | output_limit | runtime_error
    wall_s: float
    sandbox: dict[str, Any]


def _kill_uid(uid: int) -> None:
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


def run_program(source: str, stdin: str, limits: Limits, workdir: Path) -> RunResult:
    """Run one Python program once inside the sandbox; never raises for the program's faults."""
    uid = _new_uid() if os.getuid() == 0 else os.getuid()
    scratch = workdir / "scratch"
    scratch.mkdir()
    (scratch / "main.py").write_text(source)
    if os.getuid() == 0:
        for p in (scratch, scratch / "main.py"):
            os.chown(p, uid, uid)
        scratch.chmod(0o700)
    (workdir / "stdin").write_text(stdin)
    python = sandbox_python(limits)
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    status_r, status_w = os.pipe()
    cfg = {
        "mode": "run",
        "uid": uid,
        "status_fd": status_w,
        "scratch": str(scratch),
        "isolate": limits.isolate,
        "cpu_s": limits.cpu_s,
        "memory_mb": limits.memory_mb,
        "max_output_bytes": limits.max_output_bytes,
        "nproc": limits.nproc,
        "argv": [python, "-I", "main.py"],
        "env": env,
    }
    out_path, err_path = workdir / "stdout", workdir / "stderr"
    timed_out = False
    proc: subprocess.Popen | None = None
    start = time.monotonic()
    try:
        with (
            open(workdir / "stdin", "rb") as fin,
            open(out_path, "wb") as fout,
            open(err_path, "wb") as ferr,
        ):
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", LAUNCHER, json.dumps(cfg)],
                stdin=fin,
                stdout=fout,
                stderr=ferr,
                pass_fds=(status_w,),
                start_new_session=True,
                cwd=str(scratch),
                env=env,
            )
            os.close(status_w)
            status_w = -1
            try:
                proc.wait(timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        wall = time.monotonic() - start
        with os.fdopen(status_r, "rb") as f:
            status_r = -1
            status_lines = f.read().decode().splitlines()
    finally:
        for fd in (status_r, status_w):
            if fd >= 0:
                os.close(fd)
        # Whatever the program left running (forks, daemons): killed by uid or process group.
        if uid != os.getuid():
            _kill_uid(uid)
        elif proc is not None:
            with contextlib.suppress(ProcessLookupError):  # the group is already gone
                os.killpg(proc.pid, signal.SIGKILL)
    status: dict[str, Any] = {}
    for line in status_lines:  # the containment report, then an error if exec itself failed
        status.update(json.loads(line))
    if "error" in status:
        raise SandboxError(f"sandbox setup failed: {status['error']}")
    if not status:
        rc = proc.returncode if proc is not None else None
        raise SandboxError(f"sandbox launcher died before starting the program (exit {rc})")
    cap = limits.max_output_bytes
    stdout, stderr = _read_capped(out_path, cap), _read_capped(err_path, cap)
    rc = proc.returncode
    if timed_out or rc in (-signal.SIGXCPU, -signal.SIGKILL):
        outcome = "timeout"
    elif rc == -signal.SIGXFSZ or "File too large" in stderr:
        outcome = "output_limit"
    elif "MemoryError" in stderr or "Cannot allocate memory" in stderr:
        outcome = "memory_limit"
    elif rc != 0:
        outcome = "runtime_error"
    else:
        outcome = "ok"
    if outcome != "ok":
        status = {**status, "violation": _violation(stderr)}
    return RunResult(rc, stdout, stderr, outcome, round(wall, 3), status)


_VIOLATIONS = {
    "network": (
        "Network is unreachable",
        "name resolution",
        "Name or service not known",
        "Connection refused",
    ),
    "filesystem": ("Read-only file system", "Permission denied"),
    "processes": ("BlockingIOError", "Resource temporarily unavailable", "can't start new thread"),
}


def _violation(stderr: str) -> str | None:
    """Which containment the program ran into, judged from its error output."""
    for kind, markers in _VIOLATIONS.items():
        if any(m in stderr for m in markers):
            return kind
    return None


def _same_output(actual: str, expected: str) -> bool:
    a = [ln.rstrip() for ln in actual.strip().splitlines()]
    e = [ln.rstrip() for ln in str(expected).strip().splitlines()]
    return a == e


def run_tests(program: str, tests: list[dict[str, Any]], limits_dict: dict[str, Any]) -> dict:
    """Runs in a worker process. Each test is {"stdin", "expected_stdout"} or {"assert": code}.

    Stops at the first failing test. Returns {"passed", "total", "failure", "failed_test",
    "stderr_tail", "sandbox", "tests": [...]}; raises SandboxError only if the sandbox broke.
    """
    limits = Limits(**limits_dict)
    results: list[dict[str, Any]] = []
    failure: dict[str, Any] | None = None
    sandbox: dict[str, Any] = {}
    root = Path(tempfile.mkdtemp(prefix="rewardprof-sbx-"))
    os.chmod(root, 0o711)
    try:
        for i, test in enumerate(tests):
            workdir = root / str(i)
            workdir.mkdir()
            if "assert" in test:
                source, stdin = f"{program}\n\n# --- tests ---\n{test['assert']}\n", ""
            else:
                source, stdin = program, str(test.get("stdin", ""))
            res = run_program(source, stdin, limits, workdir)
            sandbox = {k: v for k, v in res.sandbox.items() if k != "violation"}
            outcome = res.outcome
            if (
                outcome == "ok"
                and "assert" not in test
                and not _same_output(res.stdout, test.get("expected_stdout", ""))
            ):
                outcome = "wrong_answer"
            results.append({"outcome": outcome, "wall_s": res.wall_s, "returncode": res.returncode})
            shutil.rmtree(workdir, ignore_errors=True)
            if outcome != "ok":
                failure = {
                    "failure": outcome,
                    "failed_test": i,
                    "violation": res.sandbox.get("violation"),
                    "stderr_tail": res.stderr[-600:],
                    "stdout_head": res.stdout[:300],
                }
                break
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = {
        "passed": sum(r["outcome"] == "ok" for r in results),
        "total": len(tests),
        "sandbox": sandbox,
        "tests": results,
    }
    out.update(failure or {"failure": None})
    return out


__all__ = ["Limits", "RunResult", "SandboxError", "asdict", "run_program", "run_tests"]

"""The two sandbox mechanisms behind one interface (`Sandbox`): bubblewrap and the fallback.

Both start the launcher (_launcher.py), which sets the rlimits, drops to the throwaway
uid and execs the program; they differ in what surrounds it:
- `BwrapSandbox`: bubblewrap builds the filesystem view and the namespaces (bwrap.py);
  the launcher runs inside it and gives the program a PID namespace of its own, so what the
  program leaves running dies with it;
- `FallbackSandbox`: the launcher alone (as root: network and mount namespaces, read-only
  mounts, a scratch tmpfs); what the program leaves running is killed by uid afterwards.
sandbox.run_program drives either one the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Protocol

from rewardprof.environments.sandbox.bwrap import SANDBOX_PROGRAM, SANDBOX_SCRATCH, bwrap_argv

LAUNCHER = (Path(__file__).with_name("_launcher.py")).read_text()


def launcher_command(python: str, cfg: dict[str, Any]) -> tuple[list[str], int]:
    """The launcher's command line and the read end of a pipe holding its configuration (the
    caller passes it to the child, then closes it). The command line names only that
    descriptor: any process may read another's command line in /proc."""
    data = json.dumps(cfg).encode()
    read_fd, write_fd = os.pipe()
    try:
        if len(data) >= 60_000:  # a pipe holds 64 KiB unless told otherwise
            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, len(data) + 4096)
        while data:
            data = data[os.write(write_fd, data) :]
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return [python, "-I", "-S", "-c", LAUNCHER, str(read_fd)], read_fd


def kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid` (as that uid, so nothing else can be hit)."""
    cmd, cfg_fd = launcher_command(sys.executable, {"mode": "kill", "uid": uid, "status_fd": 2})
    try:
        subprocess.run(
            cmd,
            timeout=30,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(cfg_fd,),
            check=False,
        )
    finally:
        os.close(cfg_fd)


class Sandbox(Protocol):
    """One mechanism: where the program and its scratch are, how the launcher is started,
    what is cleaned up after, and what it contains beyond the launcher's own report."""

    name: str

    def paths(self, workdir: Path, uid: int) -> tuple[str, str]:
        """The program file and the scratch directory as the program sees them."""
        ...

    def launcher_options(self, isolate: bool) -> dict[str, bool]:
        """The launcher's `contain` (its own namespaces) and `pid_namespace` settings."""
        ...

    def command(
        self, python: str, workdir: Path, scratch_bytes: int, packages: tuple[str, ...] = ()
    ) -> tuple[list[str], str, str]:
        """What wraps the launcher (bwrap's argv, or nothing), the launcher's interpreter and
        the cwd. Built before any file descriptor of the run is opened: it may raise."""
        ...

    def after(self, uid: int, proc: subprocess.Popen | None) -> None:
        """Once the run is over: kill what the program may have left running."""
        ...

    def containment(self) -> dict[str, bool]:
        """What this mechanism adds to the launcher's containment report."""
        ...


class BwrapSandbox:
    name = "bubblewrap"

    def paths(self, workdir: Path, uid: int) -> tuple[str, str]:
        return SANDBOX_PROGRAM, SANDBOX_SCRATCH

    def launcher_options(self, isolate: bool) -> dict[str, bool]:
        return {"contain": False, "pid_namespace": True}

    def command(
        self, python: str, workdir: Path, scratch_bytes: int, packages: tuple[str, ...] = ()
    ) -> tuple[list[str], str, str]:
        argv = bwrap_argv(python, workdir / "main.py", scratch_bytes, [], packages)
        return argv, python, str(workdir)

    def after(self, uid: int, proc: subprocess.Popen | None) -> None:
        """Nothing: what the program left died with bwrap's PID namespace."""

    def containment(self) -> dict[str, bool]:
        return {"net_isolated": True, "fs_readonly": True, "fs_hidden": True, "scratch_quota": True}


class FallbackSandbox:
    name = "launcher"

    def __init__(self) -> None:
        self.scratch = ""

    def paths(self, workdir: Path, uid: int) -> tuple[str, str]:
        scratch = workdir / "scratch"
        scratch.mkdir()
        if os.getuid() == 0:
            os.chown(scratch, uid, uid)
            scratch.chmod(0o700)
        self.scratch = str(scratch)
        return str(workdir / "main.py"), self.scratch

    def launcher_options(self, isolate: bool) -> dict[str, bool]:
        return {"contain": isolate, "pid_namespace": isolate}

    def command(
        self, python: str, workdir: Path, scratch_bytes: int, packages: tuple[str, ...] = ()
    ) -> tuple[list[str], str, str]:
        return [], sys.executable, self.scratch

    def after(self, uid: int, proc: subprocess.Popen | None) -> None:
        if uid != os.getuid():
            kill_uid(uid)
        elif proc is not None:  # not root: the process group is what can be killed
            with contextlib.suppress(ProcessLookupError):  # the group is already gone
                os.killpg(proc.pid, signal.SIGKILL)

    def containment(self) -> dict[str, bool]:
        return {}


def sandbox_for(mechanism: str) -> Sandbox:
    return BwrapSandbox() if mechanism == "bubblewrap" else FallbackSandbox()

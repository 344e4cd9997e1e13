"""The bubblewrap (`bwrap`) command line of one sandboxed run: what the program may see.

The program's filesystem view holds only `/usr` (the system's libraries and tools, with
`/usr/local` and Debian's `dist-packages` hidden), the interpreter and its standard library
(its `site-packages` hidden), a minimal `/dev`, a `/proc` of its own PID namespace, the program
read-only at `/sandbox/main.py`, and a size-limited tmpfs at `/scratch` (its working directory).
Not the project, the run directory, the sources, `/tmp`, `/run` or any host socket. New IPC,
network, PID, UTS and cgroup namespaces; a new session; every capability dropped but the three
the launcher needs to give the program a PID namespace of its own and change to the sandbox's
uid (the program has none). `--die-with-parent` kills bwrap's init, and with it the whole PID
namespace, when the worker that started it dies.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
from pathlib import Path

SANDBOX_PROGRAM = "/sandbox/main.py"
SANDBOX_SCRATCH = "/scratch"
_MERGED_USR = ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32")
_HIDDEN = ("/usr/local", "/usr/lib/python3/dist-packages")


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _ancestors(path: str) -> list[str]:
    parts = Path(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _interpreter_binds(python: str) -> list[str]:
    """Bind the interpreter and its lib directory (stdlib, libpython) at their own paths, with
    every directory above them traversable (bwrap would copy e.g. /root's mode 0700)."""
    exe = os.path.realpath(python)
    prefix = str(Path(exe).parent.parent)
    if prefix == "/usr":
        return []  # already in the view
    args: list[str] = []
    made: set[str] = set()
    lib = f"{prefix}/lib"
    for target in (exe, lib):
        for d in _ancestors(target):
            if d not in made and not d.startswith("/usr/") and d != "/usr":
                made.add(d)
                args += ["--perms", "0755", "--dir", d]
        args += ["--ro-bind", target, target]
    for site in sorted(glob.glob(f"{lib}/python3*/site-packages")):
        args += ["--tmpfs", site]
    return args


def _package_binds(packages: tuple[str, ...]) -> list[str]:
    """Each directory read-only at its own path, its parents traversable."""
    args: list[str] = []
    for path in packages:
        real = os.path.realpath(path)
        for d in _ancestors(real + "/x"):
            if not d.startswith("/usr/") and d != "/usr":
                args += ["--perms", "0755", "--dir", d]
        args += ["--ro-bind", real, real]
    return args


def bwrap_argv(
    python: str,
    program_file: Path,
    scratch_bytes: int,
    command: list[str],
    packages: tuple[str, ...] = (),
) -> list[str]:
    """The full command: `bwrap <view and namespaces> <command>`."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise FileNotFoundError("bwrap is not installed")
    args = [
        bwrap,
        "--unshare-ipc",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--cap-drop",
        "ALL",
        "--cap-add",
        "CAP_SETUID",
        "--cap-add",
        "CAP_SETGID",
        "--cap-add",
        "CAP_SYS_ADMIN",
        "--ro-bind",
        "/usr",
        "/usr",
    ]
    for top in _MERGED_USR:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    exe_prefix = str(Path(os.path.realpath(python)).parent.parent)
    for hidden in _HIDDEN:
        if os.path.isdir(hidden) and not exe_prefix.startswith(hidden):
            args += ["--tmpfs", hidden]
    args += _interpreter_binds(python)
    args += _package_binds(packages)
    args += ["--dev", "/dev", "--proc", "/proc"]
    args += ["--perms", "0755", "--dir", str(Path(SANDBOX_PROGRAM).parent)]
    args += ["--ro-bind", str(program_file), SANDBOX_PROGRAM]
    args += ["--size", str(scratch_bytes), "--perms", "1777", "--tmpfs", SANDBOX_SCRATCH]
    args += ["--chdir", SANDBOX_SCRATCH, "--", *command]
    return args


@functools.cache
def bwrap_works(python: str) -> str | None:
    """None when bubblewrap can build this sandbox here, else why not (cached per process:
    e.g. not installed, or namespaces not allowed in this container)."""
    if bwrap_path() is None:
        return "bwrap is not installed (Debian: apt-get install bubblewrap)"
    probe = Path(os.devnull)
    argv = bwrap_argv(python, probe, 1 << 20, [os.path.realpath(python), "-I", "-S", "-c", "0"])
    try:
        done = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not run: {exc}"
    if done.returncode != 0:
        return (
            f"bwrap failed (exit {done.returncode}): {done.stderr.decode(errors='replace')[:200]}"
        )
    return None

"""Each attempt of a rollout job keeps its logs: Snakemake deletes a job's log files before it
runs the job again (snakemake/jobs.py, remove_existing_output), so the rule's `2>>` alone keeps
nothing of a killed attempt. The job itself moves its logs into `attempts/` beside them: what
the rule's redirect wrote so far is appended to `attempts/<name>`, stderr continues there, and
the declared path becomes a link to it; the engine's log likewise before the engine starts.
Every attempt appends to the same file, and Snakemake deletes only the link.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

ATTEMPTS = "attempts"


def _attempts_file(path: Path) -> Path:
    """attempts/<name> beside `path`, with what `path` holds so far appended to it."""
    kept = path.parent / ATTEMPTS / path.name
    kept.parent.mkdir(parents=True, exist_ok=True)
    previous = path.read_bytes() if path.is_file() else b""
    with kept.open("ab") as f:
        f.write(previous)
    return kept


def _link(path: Path) -> None:
    """`path` replaced by a link to attempts/<name>."""
    tmp = path.with_name(f".{path.name}.link-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    os.symlink(Path(ATTEMPTS) / path.name, tmp)
    os.replace(tmp, path)  # atomic: a reader sees the old file or the link


def keep_engine_log(path: str | Path | None) -> None:
    """The engine's log (`--engine-log`): a link to its attempts file, appended to by every
    attempt's engine (the server opens it for appending)."""
    if path is None:
        return
    path = Path(path)
    if path.parent.name == ATTEMPTS or path.is_symlink():
        return
    _attempts_file(path)
    _link(path)


def keep_stderr_log() -> None:
    """When stderr is a regular file (the rule's `2>> LOG`): its content so far goes to
    attempts/<name>, stderr continues there, and LOG becomes a link to it. Linux (/proc); a
    terminal, a pipe or another system: nothing changes."""
    try:
        if not stat.S_ISREG(os.fstat(2).st_mode):
            return
        path = Path(os.readlink("/proc/self/fd/2"))
    except OSError:
        return
    if not path.is_absolute() or path.parent.name == ATTEMPTS or not path.is_file():
        return
    sys.stderr.flush()
    fd = os.open(_attempts_file(path), os.O_WRONLY | os.O_APPEND)
    try:
        os.dup2(fd, 2)
    finally:
        os.close(fd)
    _link(path)

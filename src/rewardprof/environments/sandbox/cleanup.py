"""What the sandbox leaves behind when its rollout job is killed, and how it is removed.

Every sandboxed process is gone when the rollout job is gone, however it ended: the job's
verification worker gets a parent-death SIGKILL (`bind_worker_to_job`), bubblewrap dies with
the worker (`--die-with-parent`) and takes its whole PID namespace with it; the fallback's
program has a parent-death SIGKILL of its own (set by the launcher after the uid drop).

Scratch directories are named `rewardprof-sbx-<pid>-<start time>-<random>` after the worker
that made them. On the next start of any sandbox (`sweep_stale`), the directories of workers
that no longer run (the pid is gone, or now belongs to a process with another start time) are
removed, after every process still running under the uids that worker handed out is killed
(only the fallback can leave such processes: it has no PID namespace).
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path

PREFIX = "rewardprof-sbx-"
UID_BASE = 1_000_000
UIDS_PER_WORKER = 64
_NAME = re.compile(rf"^{PREFIX}(\d+)-(\d+)-")
_swept = False


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (field 3 on), or None: no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None: no such process)."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def runs(pid: int, started: int) -> bool:
    """The process that started at `started` is still running (a zombie is not: it has ended,
    its parent has only not reaped it yet)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X") and int(fields[19]) == started


def scratch_root() -> Path:
    """A fresh scratch root owned by this worker (mode 0711: sandbox uids may traverse it)."""
    pid = os.getpid()
    root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{pid}-{start_time(pid) or 0}-"))
    os.chmod(root, 0o711)
    return root


def worker_uids(pid: int) -> range:
    start = UID_BASE + pid * UIDS_PER_WORKER
    return range(start, start + UIDS_PER_WORKER)


def processes_of_uids(uids: range) -> dict[int, list[int]]:
    """uid -> live pids, for the uids in `uids` (zombies excluded)."""
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            uid = os.stat(f"/proc/{entry}").st_uid
            if uid not in uids:
                continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # exited meanwhile
        if state not in ("Z", "X"):
            found.setdefault(uid, []).append(int(entry))
    return found


def is_stale(name: str) -> bool:
    m = _NAME.match(name)
    if m is None:  # not named by a worker (no owner to ask): not ours to remove
        return False
    return not runs(int(m.group(1)), int(m.group(2)))


def sweep_stale(kill_uid: Callable[[int], None], tmp: str | None = None) -> list[str]:
    """Kill what dead workers left running and remove their scratch directories; returns the
    directories removed. Directories of live workers (other jobs running now) are kept."""
    removed = []
    base = Path(tmp or tempfile.gettempdir())
    for path in base.glob(f"{PREFIX}*"):
        try:
            stale = path.is_dir() and is_stale(path.name)
        except OSError:
            continue  # removed by another sweep meanwhile
        if not stale:
            continue
        m = _NAME.match(path.name)
        if m is not None and os.getuid() == 0:
            for uid in processes_of_uids(worker_uids(int(m.group(1)))):
                kill_uid(uid)
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(str(path))
    return removed


def bind_worker_to_job() -> None:
    """In a verification worker forked by the rollout job: SIGKILL when the job dies, so the
    bubblewrap it started dies too. Not in the job's own process (library use), nor when the
    worker's parent is not the job (a fork server): the signal would follow the wrong process."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.pid != os.getppid():
        return
    with contextlib.suppress(OSError, AttributeError):  # not Linux: no parent-death signal
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)


def swept() -> bool:
    """This process has prepared itself already (prepare_worker ran)."""
    return _swept


def prepare_worker(kill_uid: Callable[[int], None]) -> None:
    """Once per process, before its first sandbox: bind it to its job, sweep what dead workers
    left."""
    global _swept
    if _swept:
        return
    _swept = True
    bind_worker_to_job()
    sweep_stale(kill_uid)

"""One memory limit for a whole sandbox: a cgroup v1 memory cgroup per run, where there is one.

`memory_mb` caps what every process of the sandbox holds together, whatever the program forks:
as root on a machine that mounts cgroup v1's memory controller (`/sys/fs/cgroup/memory`), each
run gets a child cgroup `rewardprof-sbx-<worker pid>-<start time>-<n>` with
`memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes`, so swap is no way around it) set to
`memory_mb` + 64 MiB (OVERHEAD_MB, the sandbox's own processes). The sandbox's first process,
a shell, joins it and then execs the sandbox (`MemoryCgroup.joining`), so every process of the
sandbox is inside. When the cgroup is full the kernel's OOM
killer kills a process in it; the run then reports `memory_oom` and the test's outcome is
`memory_limit`. The cgroup is removed after the run; those of killed workers by the sweep
(cleanup.py). Elsewhere (no root, cgroup v2 only, not Linux) only the per-process
limit (RLIMIT_AS, set by the launcher in every case) holds: a program can then hold
`memory_mb` in each process it forks. Which one applies is in every result's
`sandbox["memory_limit"]` ("cgroup" or "per_process") and in the job's log.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from pathlib import Path

from rewardprof.environments.sandbox import cleanup

ROOT = Path("/sys/fs/cgroup/memory")
# The sandbox's own processes (the launcher waiting outside the program's PID namespace, bwrap)
# hold some memory too: the cgroup allows that much above memory_mb, so a single process still
# meets its own RLIMIT_AS (a clean MemoryError) before the cgroup is full.
OVERHEAD_MB = 64
_counter = itertools.count()


def available(root: Path = ROOT) -> bool:
    """A cgroup v1 memory hierarchy this process may create cgroups in."""
    return (root / "memory.limit_in_bytes").exists() and os.access(root, os.W_OK)


class MemoryCgroup:
    """The memory cgroup of one sandboxed run (the sweep at a worker's start removes those of
    killed workers: sweep_stale)."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, memory_mb: int, root: Path = ROOT) -> MemoryCgroup | None:
        """A fresh cgroup limited to `memory_mb` MiB, or None where there is none to make."""
        if not available(root):
            return None
        pid = os.getpid()
        name = f"{cleanup.PREFIX}{pid}-{cleanup.start_time(pid) or 0}"
        path = root / f"{name}-{next(_counter)}"
        path.mkdir()
        group = cls(path)
        limit = str((memory_mb + OVERHEAD_MB) << 20)
        try:
            (path / "memory.limit_in_bytes").write_text(limit)
            if (path / "memory.memsw.limit_in_bytes").exists():
                (path / "memory.memsw.limit_in_bytes").write_text(limit)
        except OSError:
            group.remove()
            raise
        return group

    @property
    def procs(self) -> str:
        return str(self.path / "cgroup.procs")

    def joining(self, cmd: list[str]) -> list[str]:
        """`cmd` started by a shell that first moves itself into this cgroup, then execs it:
        every process of the sandbox is inside from its start (a shell: cheaper than Python)."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', self.procs, *cmd]

    def _read(self, name: str) -> str:
        try:
            return (self.path / name).read_text()
        except OSError:
            return ""

    def report(self) -> dict[str, object]:
        """What the run used and whether the kernel had to kill for the limit."""
        fields = dict(line.split() for line in self._read("memory.oom_control").splitlines())
        peak = self._read("memory.max_usage_in_bytes").strip() or "0"
        return {
            "memory_limit": "cgroup",
            "memory_oom": int(fields.get("oom_kill", 0)) > 0,
            "memory_peak_mb": round(int(peak) / (1 << 20), 1),
        }

    def remove(self) -> None:
        """Kill what is left in it, then remove it (a dying process leaves it in a moment)."""
        for _ in range(200):
            if not self.path.exists():
                return
            for pid in self._read("cgroup.procs").split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.01)  # liveness only: the killed processes are being reaped


def sweep_stale(root: Path = ROOT) -> list[str]:
    """Remove the cgroups of workers that no longer run (a killed rollout job's)."""
    if not available(root):
        return []
    removed = []
    for path in root.glob(f"{cleanup.PREFIX}*"):
        if cleanup.is_stale(path.name):
            MemoryCgroup(path).remove()
            if not path.exists():
                removed.append(str(path))
    return removed

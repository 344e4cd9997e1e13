"""The test tiers, by directory, and the guard that keeps L0 pure.

A test's tier is the first folder of its path under tests/: the conftest gives every test its
tier's marker (so `-m unit` or `-m "not engine"` select by tier without any file saying it), and
a folder that is in no tier fails the collection, so a new folder is placed on purpose.

L0 (tests/unit) runs in process: while one of its tests runs (setup, call and teardown), a
process that starts another process (subprocess, asyncio subprocess, fork, posix_spawn, exec,
os.system, a multiprocessing or pebble pool) fails that test, even when the code under test
catches the error. The guard is an audit hook (the events CPython raises for these calls) plus a
wrapper around `_posixsubprocess.fork_exec`, the one call multiprocessing's spawn and forkserver
start methods use without raising an event."""

from __future__ import annotations

import _posixsubprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# folder under tests/ -> (marker, tier); the markers are registered in pyproject.toml
TIERS = {
    "unit": ("unit", "L0"),
    "functional": ("functional", "L1"),
    "faults": ("functional", "L1"),
    "benchmarks": ("functional", "L1"),
    "engine": ("engine", "L2"),
    "workflow": ("workflow", "L3"),
    "slurm": ("slurm", "L3"),
}
PURE_TIER = "L0"

# the audit events of every way Python starts a process (os.spawn* and os.exec* go through
# os.fork / os.exec; asyncio subprocesses through subprocess.Popen)
SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system"}
)


class SpawnInPureTest(BaseException):
    """Raised where an L0 test starts a process. A BaseException, so that the code under test's
    `except Exception` does not hide it (the guard reports the test failed either way)."""


class SpawnGuard:
    """While `forbidding()`, every attempt to start a process raises SpawnInPureTest and is
    recorded in `attempts`. Installed once per interpreter (an audit hook cannot be removed)."""

    def __init__(self) -> None:
        self.active = False
        self.attempts: list[str] = []
        self._installed = False

    def install(self) -> None:
        if self._installed:
            return
        self._installed = True
        sys.addaudithook(self._on_event)
        real_fork_exec = _posixsubprocess.fork_exec

        def guarded_fork_exec(*args, **kwargs):
            self._check("_posixsubprocess.fork_exec", args[:1])
            return real_fork_exec(*args, **kwargs)

        _posixsubprocess.fork_exec = guarded_fork_exec

    def _on_event(self, event: str, args: tuple) -> None:
        if event in SPAWN_EVENTS:
            self._check(event, args)

    def _check(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        what = f"{event}{_short(args)}"
        self.attempts.append(what)
        raise SpawnInPureTest(f"an L0 test (tests/unit) started a process: {what}")

    @contextmanager
    def forbidding(self, forbid: bool = True) -> Iterator[list[str]]:
        """Forbid (or allow) starting processes inside the block; yields the attempts made in
        it. Nests: the enclosing state and its attempts are restored on exit."""
        self.install()
        saved = self.active, self.attempts
        self.active, self.attempts = forbid, []
        try:
            yield self.attempts
        finally:
            self.active, self.attempts = saved


def _short(args: tuple) -> str:
    text = repr(args)
    return text if len(text) <= 200 else text[:200] + "...)"


GUARD = SpawnGuard()


def tier_of(path: Path, tests_root: Path) -> tuple[str, str]:
    """(marker, tier) of the test file at `path`; ValueError for a folder in no tier."""
    parts = path.relative_to(tests_root).parts
    if len(parts) < 2 or parts[0] not in TIERS:
        raise ValueError(
            f"{path}: not in a test tier; put it under one of tests/{', tests/'.join(TIERS)} "
            "(tests/harness/tiers.py maps folders to tiers)"
        )
    return TIERS[parts[0]]


class TierPlugin:
    """Marks each test with its tier's marker and runs the L0 tests under the spawn guard."""

    def __init__(self, tests_root: Path, guard: SpawnGuard = GUARD):
        self.tests_root = tests_root
        self.guard = guard

    def _is_pure(self, item: pytest.Item) -> bool:
        return item.get_closest_marker("tier_l0") is not None

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            marker, tier = tier_of(item.path, self.tests_root)
            item.add_marker(marker)
            if tier == PURE_TIER:
                item.add_marker("tier_l0")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        with self.guard.forbidding(self._is_pure(item)):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if self.guard.active and self.guard.attempts:
            attempts, self.guard.attempts[:] = list(self.guard.attempts), []
            if not report.failed:  # the code under test caught the guard's exception
                report.outcome = "failed"
                report.longrepr = (
                    f"an L0 test (tests/unit) started a process during {call.when}; move it to "
                    "tests/functional or keep it in process: " + "; ".join(attempts)
                )
        return report

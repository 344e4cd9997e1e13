"""Where the suite's CPU goes: the processor seconds each test used, its own and those of the
processes it started and waited for (Snakemake, rollout jobs, vLLM servers), printed after
pytest's `--durations` table, then summed by scheduling unit (harness/scheduling.py).

On a 2-core machine the suite's time is set by CPU more than by waiting: the tests to make
cheaper are the ones at the top of this table, not only the slowest by wall time. A server a
fixture started is counted in the test during whose teardown it was reaped; a Snakemake run
forked from the preloaded server (harness/preloaded.py) reports its own CPU and its jobs'.
Each test's figure travels in its teardown report (`user_properties`), so the table is the same
whether the tests ran in this process or in pytest-xdist workers."""

from __future__ import annotations

import resource
import time

import pytest

from harness import preloaded, stage_server
from harness.scheduling import unit_of

SHOWN = 25
UNITS_SHOWN = 12
KEY = "cpu_s"


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    forked = preloaded.forked_cpu_s  # the Snakemake runs the forkserver reaped
    forked += stage_server.cpu_s()  # the stage commands the stage server ran
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + forked


class CpuReport:
    def __init__(self) -> None:
        self.per_test: dict[str, float] = {}
        self.wall: dict[str, float] = {}  # each test's setup, call and teardown, in seconds
        self.started_at = time.monotonic()
        self._before: dict[str, float] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        self._before[item.nodeid] = _cpu_seconds()
        yield

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        report = yield
        if call.when == "teardown" and item.nodeid in self._before:
            used = _cpu_seconds() - self._before.pop(item.nodeid)
            report.user_properties.append((KEY, used))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.wall[report.nodeid] = self.wall.get(report.nodeid, 0.0) + report.duration
        for key, value in report.user_properties:
            if key == KEY:
                self.per_test[report.nodeid] = value

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.per_test:
            return
        wall = time.monotonic() - self.started_at
        cpu = sum(self.per_test.values())
        tr = terminalreporter
        tr.write_sep("=", f"most CPU: {SHOWN} tests (own + waited-for processes)")
        top = sorted(self.per_test.items(), key=lambda kv: kv[1], reverse=True)[:SHOWN]
        for nodeid, seconds in top:
            tr.write_line(f"{seconds:8.1f} s cpu  {nodeid}")
        busy = cpu / max(wall, 1e-9)
        tr.write_line(
            f"tests: {cpu:.0f} s cpu over {wall:.0f} s wall ({busy:.2f} cores busy on average);"
            f" the top {len(top)}: {sum(s for _, s in top):.0f} s cpu"
        )
        self._units(tr)

    def _units(self, tr) -> None:
        """The same by scheduling unit (harness/scheduling.py): what one worker runs in a row."""
        cpu: dict[str, float] = {}
        wall: dict[str, float] = {}
        for nodeid, seconds in self.per_test.items():
            unit = unit_of(nodeid)
            cpu[unit] = cpu.get(unit, 0.0) + seconds
            wall[unit] = wall.get(unit, 0.0) + self.wall.get(nodeid, 0.0)
        tr.write_sep("=", f"most CPU: {UNITS_SHOWN} units (cpu s, wall s)")
        for unit in sorted(cpu, key=cpu.__getitem__, reverse=True)[:UNITS_SHOWN]:
            tr.write_line(f"{cpu[unit]:8.1f} s cpu {wall[unit]:8.1f} s wall  {unit}")

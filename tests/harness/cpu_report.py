"""Where the suite's CPU goes: the processor seconds each test used, its own and those of the
processes it started and waited for (Snakemake, rollout jobs, vLLM servers), printed after
pytest's `--durations` table.

The suite's time on a 2-core machine is set by CPU, not by waiting: run in parallel it took
about as long, every test slower by the factor it shared the cores with others. So the tests to
make cheaper are the ones at the top of this table, not only the slowest by wall time. A server
a fixture started is counted in the test during whose teardown it was reaped."""

from __future__ import annotations

import resource
import time

import pytest

SHOWN = 25


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuReport:
    def __init__(self) -> None:
        self.per_test: dict[str, float] = {}
        self.started = (time.monotonic(), _cpu_seconds())

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):
        before = _cpu_seconds()
        yield
        self.per_test[item.nodeid] = _cpu_seconds() - before

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.per_test:
            return
        wall = time.monotonic() - self.started[0]
        cpu = _cpu_seconds() - self.started[1]
        tr = terminalreporter
        tr.write_sep("=", f"most CPU: {SHOWN} tests (own + waited-for processes)")
        top = sorted(self.per_test.items(), key=lambda kv: kv[1], reverse=True)[:SHOWN]
        for nodeid, seconds in top:
            tr.write_line(f"{seconds:8.1f} s cpu  {nodeid}")
        busy = cpu / max(wall, 1e-9)
        tr.write_line(
            f"session: {cpu:.0f} s cpu over {wall:.0f} s wall ({busy:.2f} cores busy on average);"
            f" the top {len(top)}: {sum(s for _, s in top):.0f} s cpu"
        )

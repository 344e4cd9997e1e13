"""Shared fixtures and the tiers; the helper functions live in tests/helpers.py.

Every test gets its tier's marker from its folder (tests/harness/tiers.py), and the L0 tests
(tests/unit) run under a guard that fails a test that starts a process; tests/harness/scheduling.py
groups and orders the tests for `make test`'s parallel workers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness.cpu_report import CpuReport
from harness.scheduling import OrderPlugin, xdist_plugin
from harness.tiers import TierPlugin

from rewardprof.testing.fake_server import FakeOpenAI, scripted

pytest_plugins = ["pytester"]

# The suite's processes share two cores: OpenMP threads that spin between kernels (torch in the
# GRPO step and the model conversion, vLLM servers the docs' commands start) hold cores the
# others need; serve mode sets this for the servers it starts (engine/server.py CPU_ENV)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TierPlugin(Path(__file__).parent), "rewardprof-tiers")
    config.pluginmanager.register(CpuReport(), "rewardprof-cpu-report")
    config.pluginmanager.register(OrderPlugin(), "rewardprof-order")
    if (units := xdist_plugin()) is not None:
        config.pluginmanager.register(units, "rewardprof-units")


@pytest.fixture
def fake_server():
    with FakeOpenAI(scripted({})) as server:
        yield server

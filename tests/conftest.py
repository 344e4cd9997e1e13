"""Shared fixtures; the helper functions live in tests/helpers.py."""

from __future__ import annotations

import pytest

from rewardprof.testing.fake_server import FakeOpenAI, scripted


@pytest.fixture
def fake_server():
    with FakeOpenAI(scripted({})) as server:
        yield server

"""The tier plugin itself: every folder of tests/ is in a tier, and the L0 guard fails a test
that starts a process, whichever way it starts it, even when the code under test swallows the
guard's exception. The spawning code never runs here: the guard stops each call before it."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
from harness.tiers import GUARD, TIERS, SpawnInPureTest, tier_of

TESTS = Path(__file__).resolve().parents[1]

SPAWNS = {
    "subprocess.run": lambda: subprocess.run([sys.executable, "-c", "pass"], check=False),
    "os.system": lambda: os.system("true"),
    "os.fork": os.fork,
    "os.posix_spawn": lambda: os.posix_spawn("/bin/true", ["true"], {}),
    "asyncio subprocess": lambda: asyncio.run(asyncio.create_subprocess_exec("true")),
    "multiprocessing spawn": lambda: (
        multiprocessing.get_context("spawn").Process(target=print).start()
    ),
}


def test_every_test_folder_is_in_a_tier():
    folders = {p.parent.relative_to(TESTS).parts[0] for p in TESTS.rglob("test_*.py")}
    assert folders <= set(TIERS), folders - set(TIERS)
    assert tier_of(TESTS / "unit" / "test_x.py", TESTS) == ("unit", "L0")
    assert tier_of(TESTS / "workflow" / "test_x.py", TESTS) == ("workflow", "L3")
    with pytest.raises(ValueError, match="not in a test tier"):
        tier_of(TESTS / "elsewhere" / "test_x.py", TESTS)


def test_this_test_runs_under_the_guard(request):
    assert request.node.get_closest_marker("unit") is not None
    assert GUARD.active


@pytest.mark.parametrize("how", list(SPAWNS))
def test_the_guard_stops_every_way_of_starting_a_process(how):
    with GUARD.forbidding() as attempts:
        with pytest.raises(SpawnInPureTest, match="started a process"):
            SPAWNS[how]()
        assert len(attempts) >= 1
    # the enclosing test's record is untouched: this test itself passes
    assert GUARD.attempts == []


def test_a_swallowed_spawn_still_fails_the_test(pytester):
    """A test whose code catches everything (as a verifier turning any error into a verdict
    might) is still reported failed; the same code in an L1 folder is left alone."""
    pytester.makeconftest(
        "from pathlib import Path\n"
        "from harness.tiers import TierPlugin\n"
        "def pytest_configure(config):\n"
        "    config.pluginmanager.register(TierPlugin(Path(__file__).parent), 'tiers')\n"
    )
    body = (
        "import subprocess\n"
        "from harness.tiers import GUARD\n"
        "def test_spawn():\n"
        "    try:\n"
        "        subprocess.run(['true'])\n"
        "    except BaseException:\n"
        "        pass\n"
        "def test_guarded():\n"
        "    assert GUARD.active\n"
    )
    (pytester.path / "unit").mkdir()
    (pytester.path / "unit" / "test_pure.py").write_text(body)
    (pytester.path / "functional").mkdir()
    functional = (
        "from harness.tiers import GUARD\ndef test_not_guarded():\n    assert not GUARD.active\n"
    )
    (pytester.path / "functional" / "test_l1.py").write_text(functional)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_spawn*", "*started a process during call*subprocess.Popen*"]
    )
    assert GUARD.active and GUARD.attempts == []  # the outer run's guard is as it was

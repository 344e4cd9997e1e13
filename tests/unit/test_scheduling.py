"""The parallel run's units (tests/harness/scheduling.py): tests sharing a piece of the machine
share one worker, a module stays in one unit, and the long units start first."""

from __future__ import annotations

import re
from pathlib import Path

from harness.scheduling import rank_of, unit_of, xdist_plugin

TESTS = Path(__file__).resolve().parents[1]


def test_tests_of_one_piece_share_a_unit_and_others_are_their_file():
    assert unit_of("tests/engine/test_real_engine.py::test_x") == "vllm"
    assert unit_of("tests/engine/test_real_lifecycle.py::test_y[a-b]") == "vllm"
    assert unit_of("tests/slurm/test_slurm_run.py::test_z") == "slurm"
    # the documented engine commands use their own checkout's model and the docs' ports
    assert unit_of("tests/engine/test_real_doc_commands.py::test_x") == "vllm-docs"
    assert unit_of("tests/engine/test_fleet_fake.py::test_x") == "engine/test_fleet_fake.py"
    assert unit_of("tests/workflow/test_export.py::test_x[p::q]") == "workflow/test_export.py"


def test_long_units_are_handed_out_first():
    assert rank_of("vllm-docs") == rank_of("vllm")  # the two engine units start together
    order = ["vllm", "slurm", "workflow/test_export.py", "faults/test_kill.py", "unit/test_x.py"]
    assert sorted(reversed(order), key=rank_of) == order
    assert rank_of("functional/environments/test_code_sandbox.py") < rank_of("unit/test_x.py")


def test_the_scheduler_splits_by_unit():
    plugin = xdist_plugin()
    assert plugin is not None  # the test extra installs pytest-xdist
    config = type("C", (), {"option": type("O", (), {})(), "getvalue": lambda self, k: "load"})()
    assert plugin.pytest_xdist_make_scheduler(config, None) is None  # other modes: xdist's own


def test_every_test_file_that_starts_the_real_engine_is_in_the_vllm_unit():
    """The real engine's tests convert the model into one shared directory and need ~4 GB and
    both cores per server: two at once would race for the first and starve each other."""
    users = [
        path.relative_to(TESTS.parent).as_posix()
        for path in TESTS.rglob("test_*.py")
        if re.search(r"\bdef \w+\([^)]*\bmodels_dir\b", path.read_text())
    ]
    assert users, "no test uses the models_dir fixture: the check below would prove nothing"
    assert {unit_of(f"{path}::t") for path in users} == {"vllm"}, users

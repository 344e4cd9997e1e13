"""How `make test` runs the suite in parallel (pytest-xdist, `--dist loadscope`): which tests
must share one worker, and in which order the units start.

A unit is a test file, so a module's fixtures (one Snakemake run, one server) are set up once,
as in a serial run; a few units span files because the tests share one piece of the machine:
- `slurm`: the one local Slurm cluster (tests count its jobs and nodes; two at a time would see
  each other's);
- `vllm`: the real engine (~4 GB and both cores per server, and the converted model in
  resources/models that the first of them makes).
The real engine's documented commands (`engine/test_real_doc_commands.py`) are a unit of their
own, `vllm-docs`: they convert the model into their own copy of the checkout and start their
servers on the docs' ports, so they share nothing with `vllm`; inside it they made the suite's
longest unit, which set the suite's time once the Snakemake runs' jobs were forked
(harness/stage_server.py).
The units are handed out longest first (the real engine's two, then Slurm's, then the
Snakemake runs, the fault tests, and last the many short in-process ones), so that no long unit
starts when the others are done. The ranks are orders of magnitude, not measurements to keep up
to date: they only order the units.

xdist's own `loadgroup` cannot be used for this: it renames each test `<nodeid>@<group>`
through an attribute that pytest 9.2 no longer reads, so its groups are silently ignored. Here
the scheduler computes a test's unit from its node id instead.
"""

from __future__ import annotations

import pytest

# tests sharing one piece: (path prefix under tests/, unit)
SHARED = (
    ("engine/test_real_doc_commands.py", "vllm-docs"),
    ("engine/test_real_", "vllm"),
    ("slurm/", "slurm"),
)
# the rank of a unit in the queue, by its name or its tier's folder (lower starts first)
RANK = {
    "vllm": 0,
    "vllm-docs": 0,
    "engine/test_model_convert_kill.py": 0,
    "slurm": 1,
    "workflow": 2,
    "faults": 3,
    "functional": 4,
    "benchmarks": 4,
}
LAST = 9  # tests/unit and anything unranked: short units that fill the gaps at the end


def unit_of(nodeid: str) -> str:
    """The unit of the test `nodeid` ('tests/<folder>/<file>::<name>'): the piece it shares
    with other files, or its file (under tests/)."""
    path = nodeid.split("::", 1)[0].removeprefix("tests/")
    for prefix, unit in SHARED:
        if path.startswith(prefix):
            return unit
    return path


def rank_of(unit: str) -> int:
    return RANK.get(unit, RANK.get(unit.split("/", 1)[0], LAST))


class OrderPlugin:
    """Orders the collected tests by their unit's rank (a stable sort: a unit keeps its file's
    order). The parallel queue is built in this order; a serial run runs in it too."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items.sort(key=lambda item: rank_of(unit_of(item.nodeid)))


def xdist_plugin():
    """The plugin that gives pytest-xdist's `--dist loadscope` these units (None when xdist is
    not installed: `make test-fast` may run without it)."""
    try:
        from xdist.scheduler import LoadScopeScheduling
    except ImportError:
        return None

    class UnitScheduling(LoadScopeScheduling):
        """xdist's scope scheduling (a scope's tests run on one worker, scopes are handed out
        in queue order) with our units as the scopes, in collection order."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False  # keep the queue in collection order

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    class UnitSchedulingPlugin:
        @pytest.hookimpl(tryfirst=True)
        def pytest_xdist_make_scheduler(self, config, log):
            if config.getvalue("dist") == "loadscope":
                return UnitScheduling(config, log)
            return None

    return UnitSchedulingPlugin()

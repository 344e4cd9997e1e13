"""The package's contracts: one stage entry point, one error tree, one command table."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import rewardprof
from rewardprof import cli
from rewardprof.core.errors import RewardprofError

STAGES = ["materialize", "shard", "rollout", "merge", "profile", "export", "report"]
# public functions besides `run` that other modules (or the rules, or tests) use
SHARED = {
    "materialize": {"make_task_id"},
    "merge": {"journal_notes"},
    "profile": {"task_profile"},
    "export": {"drop_reasons", "label_weights"},
}
# programs the sandbox or the code harness runs (each reads its argv and pipes when
# imported), not modules
NOT_MODULES = {
    "rewardprof.environments.sandbox._launcher",
    "rewardprof.environments.code._runner",
    "rewardprof.environments.code._judge",
    # a script the engine interpreter runs as a file: it imports torch, which the core lacks
    "rewardprof.train.scripts.grpo_torch",
}
# stdlib only: its text also runs in the sandbox and in the judge, where rewardprof is not
# importable, so its exceptions cannot derive from RewardprofError (the harness turns each one
# into a test's outcome; none leaves it)
STDLIB_ONLY = {
    "rewardprof.environments.code._wire",
    "rewardprof.environments.code._values",
    "rewardprof.environments.code._remote",
}


def _modules():
    for info in pkgutil.walk_packages(rewardprof.__path__, "rewardprof."):
        if info.name not in NOT_MODULES:
            yield importlib.import_module(info.name)


@pytest.mark.parametrize("name", STAGES)
def test_each_stage_has_one_entry_point_run_cfg_paths(name):
    stage = importlib.import_module(f"rewardprof.stages.{name}")
    assert list(inspect.signature(stage.run).parameters) == ["cfg", "paths"]
    public = {
        n
        for n, obj in vars(stage).items()
        if inspect.isfunction(obj) and obj.__module__ == stage.__name__ and not n.startswith("_")
    }
    assert public == {"run"} | SHARED.get(name, set())


def test_every_public_exception_derives_from_rewardprof_error():
    public = {
        f"{module.__name__}.{name}": obj
        for module in _modules()
        for name, obj in vars(module).items()
        if inspect.isclass(obj)
        and issubclass(obj, BaseException)
        and obj.__module__ == module.__name__
        and not name.startswith("_")
        and module.__name__ not in STDLIB_ONLY
    }
    assert len(public) >= 14  # ConfigError, SourceError, ..., RowError: the walk found them
    assert [name for name, cls in public.items() if not issubclass(cls, RewardprofError)] == []


def test_main_turns_a_rewardprof_error_into_one_line_and_its_exit_code(capsys, monkeypatch):
    assert cli.main(["validate"]) == 2
    assert capsys.readouterr().err == (
        "rewardprof validate: error: give --config FILE or --config-json TEXT\n"
    )

    from rewardprof.engine import model

    def fail(*args):
        raise model.ModelError("conversion failed")

    monkeypatch.setattr(model, "convert_builtin", fail)
    assert cli.main(["model", "convert", "smollm2-135m", "--out", "x"]) == 1
    assert capsys.readouterr().err == "rewardprof model: error: conversion failed\n"


def test_the_command_table_is_the_only_list_of_subcommands():
    names = [c.name for c in cli.COMMANDS]
    assert len(names) == len(set(names))
    subparsers = cli.build_parser()._subparsers._group_actions[0]
    assert list(subparsers.choices) == names
    assert not any(hasattr(m, "register") for m in _modules())

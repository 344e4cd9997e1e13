"""The package's contracts: one stage entry point, one error tree, one command table."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import rewardprof
from rewardprof import cli
from rewardprof.core import redaction
from rewardprof.core.errors import RewardprofError
from rewardprof.stages import paths_class_of

STAGES = [
    "materialize",
    "shard",
    "rollout",
    "rollout.first_round",
    "adaptive.prior",
    "merge",
    "adaptive.audit",
    "adaptive.savings",
    "profile",
    "export",
    "report",
]
# public functions besides `run` that other modules (or the rules, or tests) use
SHARED = {
    "materialize": {"make_task_id"},
    "merge": {"journal_notes"},
    "profile": {"task_profile"},
    "export": {"drop_reasons", "label_weights"},
    "adaptive.audit": {"audit_run"},
    "adaptive.savings": {"savings"},
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
    # its own paths class: a frozen dataclass of typed fields, each with its help
    paths = paths_class_of(stage.run)
    assert dataclasses.is_dataclass(paths) and paths.__dataclass_params__.frozen
    assert paths.__module__ == "rewardprof.stages" and paths.__name__.endswith("Paths")
    assert all(f.metadata.get("help") for f in dataclasses.fields(paths))
    assert callable(getattr(paths, "from_layout", None))
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


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("{bad", "--config-json: not valid YAML/JSON: Expecting property name enclosed in "
         "double quotes: line 1 column 2 (char 1)"),
        ('{"a":' * 5000 + "1" + "}" * 5000,
         "--config-json: nested too deep to read (at most 40 levels)"),
        # within what JSON reads, past the config's limit: refused before the URLs are walked
        ('{"engine": {"extra_body": ' + '{"a":' * 200 + "1" + "}" * 202,
         "--config-json: engine.extra_body: nested deeper than 40 levels"),
    ],
)  # fmt: skip
def test_config_json_that_is_not_json_or_too_deep_is_one_line(capsys, monkeypatch, text, line):
    walked = []
    monkeypatch.setattr(redaction, "unmask_urls", lambda data, origin: walked.append(data))
    assert cli.main(["validate", "--config-json", text]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rewardprof validate: error: {line}") and err.count("\n") == 1
    assert walked == []


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


@pytest.mark.parametrize(
    ("command", "paths"),
    [
        ("shard", ["--tasks", "t", "--out", "o", "--shard", "1", "--num-shards", "3"]),
        ("merge", ["--tasks", "t", "--journal", "j", "--out", "o", "--report", "r", "a", "b"]),
        ("rollout", ["--tasks", "t", "--journal", "j", "--out", "o", "--shard", "0"]),
    ],
)
def test_stage_arguments_come_from_the_paths_fields(command, paths, tmp_path):
    """The flags are the fields' names (the rules pass them); the values come back typed."""
    from rewardprof.stages import MergePaths, ShardPaths, paths_from
    from rewardprof.store.shards import ShardPosition

    parser = cli.build_parser(command)
    if command == "rollout":  # --num-shards is required with --shard
        with pytest.raises(SystemExit):
            parser.parse_args([command, *paths])
        return
    args = parser.parse_args([command, *paths])
    if command == "shard":
        got = paths_from(ShardPaths, args)
        assert got.shard == ShardPosition(1, 3) and got.shard.tag == "1-of-3"
    else:
        got = paths_from(MergePaths, args)
        assert got.shards == (Path("a"), Path("b")) and got.report == Path("r")


COMMAND_OF = {
    "materialize": "materialize",
    "shard": "shard",
    "rollout": "rollout",
    "rollout.first_round": "adaptive-first-round",
    "adaptive.prior": "adaptive-prior",
    "merge": "merge",
    "adaptive.audit": "adaptive-audit",
    "adaptive.savings": "adaptive-savings",
    "profile": "profile",
    "export": "export",
    "report": "report",
}


def _as_text(value) -> str:
    """A path-like field's value as the rule writes it (a RunLayout, a files object: its dir)."""
    return str(getattr(value, "root", None) or getattr(value, "dir", None) or value)


def _command_line(paths) -> list[str]:
    """The arguments a rule passes for `paths` (the fields' flags, as the rules spell them)."""
    from rewardprof.store.shards import ShardPosition

    words: list[str] = []
    for f in dataclasses.fields(paths):
        value = getattr(paths, f.name)
        if not f.metadata["cli"] or value is None:
            continue
        if isinstance(value, ShardPosition):
            words += ["--shard", str(value.index), "--num-shards", str(value.count)]
        elif f.metadata["positional"]:
            words += [str(v) for v in value]
        else:
            words += ["--" + f.name.replace("_", "-"), _as_text(value)]
    return words


@pytest.mark.parametrize("name", STAGES)
def test_each_stage_command_takes_its_paths_from_the_layout_back(name):
    """Paths from RunLayout -> the command line the rules write -> the same paths: the CLI's
    arguments are the paths class's fields, every one of them."""
    from rewardprof.stages import paths_from
    from rewardprof.store.layout import RunLayout
    from rewardprof.store.shards import ShardPosition

    stage = importlib.import_module(f"rewardprof.stages.{name}")
    paths_class = paths_class_of(stage.run)
    layout = RunLayout("results/r", 2)
    sharded = any(
        f.type in ("ShardPosition", ShardPosition) for f in dataclasses.fields(paths_class)
    )
    flags = {k: True for k in paths_class.layout_flags()}
    paths = paths_class.from_layout(layout, ShardPosition(1, 2) if sharded else None, **flags)
    command = COMMAND_OF[name]
    config = [] if name in ("shard", "merge", "adaptive.savings", "report") else ["--config", "c"]
    args = cli.build_parser(command).parse_args([command, *config, *_command_line(paths)])
    back = paths_from(paths_class, args)
    for f in dataclasses.fields(paths_class):
        if f.metadata["cli"]:
            assert _as_text(getattr(back, f.name)) == _as_text(getattr(paths, f.name)), f.name


def test_the_command_table_is_the_only_list_of_subcommands():
    names = [c.name for c in cli.COMMANDS]
    assert len(names) == len(set(names))
    subparsers = cli.build_parser()._subparsers._group_actions[0]
    assert list(subparsers.choices) == names
    assert not any(hasattr(m, "register") for m in _modules())

"""What `rewardprof validate` and the Snakefile (before the DAG is built) catch without reading
a row: a generator task that does not exist (with the nearest name), a source path that is a
directory, and options too big or too deep (a YAML anchor bomb)."""

from __future__ import annotations

import json
import time
from importlib.metadata import version

import pytest
import yaml

from rewardprof.cli import main
from rewardprof.core.config import ConfigError
from rewardprof.manifest.load import validate_config
from rewardprof.sources.checks import check_sources


def _rg_entry(task: str) -> dict:
    return {
        "label": "rg",
        "environment": "reasoning_gym",
        "source": {"generator": "reasoning_gym", "task": task, "size": 2},
    }


def test_misspelled_generator_task_names_the_nearest(tmp_path):
    cfg = validate_config({"entries": [_rg_entry("basic_arithmetc")]})
    with pytest.raises(ConfigError) as err:
        check_sources(cfg, tmp_path)
    assert str(err.value) == (
        "entries[0].source.task: unknown reasoning_gym task 'basic_arithmetc'; "
        "did you mean basic_arithmetic?"
    )
    check_sources(validate_config({"entries": [_rg_entry("basic_arithmetic")]}), tmp_path)


def test_generator_task_names_are_cached_per_install(tmp_path, monkeypatch):
    """The names are read from the cache once listed (a dry run then imports no
    reasoning_gym); a damaged cache is listed again and rewritten."""
    import reasoning_gym

    from rewardprof.sources import generators

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    names = generators._task_names("reasoning_gym")
    assert names == sorted(reasoning_gym.factory.DATASETS) and "basic_arithmetic" in names
    (cache,) = (tmp_path / "rewardprof").glob("reasoning-gym-tasks-*.json")
    assert f"-{version('reasoning_gym')}-" in cache.name  # keyed by the install
    # what the cache says is what the check uses: proof that it is read, not re-listed
    cache.write_text('["only_this_task"]')
    check_sources(validate_config({"entries": [_rg_entry("only_this_task")]}), tmp_path)
    with pytest.raises(ConfigError, match="unknown reasoning_gym task 'basic_arithmetic'"):
        check_sources(validate_config({"entries": [_rg_entry("basic_arithmetic")]}), tmp_path)
    for damaged in ('["only_this_task"', "[]", "[1, 2]", '{"a": 1}'):
        cache.write_text(damaged)
        assert generators._task_names("reasoning_gym") == names
        assert json.loads(cache.read_text()) == names


def test_validate_command_checks_sources(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"entries": [_rg_entry("basic_arithmetc")]}))
    assert main(["validate", "--config", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [
        "rewardprof validate: error: entries[0].source.task: unknown reasoning_gym task "
        "'basic_arithmetc'; did you mean basic_arithmetic?"
    ]
    folder = tmp_path / "d.jsonl"
    folder.mkdir()
    entry = {"label": "m", "environment": "math", "source": str(folder)}
    config.write_text(yaml.safe_dump({"entries": [entry]}))
    assert main(["validate", "--config", str(config)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"rewardprof validate: error: entries[0].source: {folder}: is a directory, not a JSONL "
        f"or Parquet file"
    ]


def test_directory_source_is_one_line(tmp_path):
    (tmp_path / "data.jsonl").mkdir()
    cfg = validate_config(
        {"entries": [{"label": "m", "environment": "math", "source": "data.jsonl"}]}
    )
    with pytest.raises(ConfigError, match=r"^entries\[0\]\.source: data\.jsonl: is a directory"):
        check_sources(cfg, tmp_path)


def _bomb(levels: int) -> list:
    """Nested lists that share each level: what YAML anchors and aliases load into."""
    node: list = [1] * 10
    for _ in range(levels):
        node = [node] * 10
    return node


def test_anchor_bomb_in_options_fails_fast_as_one_line(tmp_path):
    text = yaml.safe_dump(
        {
            "entries": [
                {
                    "label": "m",
                    "environment": "math",
                    "source": "x.jsonl",
                    "options": {"pad": _bomb(9)},
                }
            ]
        }
    )
    assert len(text) < 5000 and "&id" in text  # the file stays tiny: aliases
    config = tmp_path / "bomb.yaml"
    config.write_text(text)
    started = time.monotonic()
    with pytest.raises(ConfigError) as err:
        validate_config(yaml.safe_load(text))
    assert time.monotonic() - started < 30  # 10^10 values if it were expanded
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 400
    # the whole config is counted first (core.limits.config_problem): the bomb stops there
    assert msg.startswith("config: entries[0]: the config has more than 500000 values by here")


def test_options_nested_too_deep():
    deep: dict = {}
    node = deep
    for _ in range(35):  # deeper than options allow, within the whole config's 40 levels
        node["x"] = {}
        node = node["x"]
    with pytest.raises(ConfigError, match=r"entries\[0\]\.options: nested deeper than 32"):
        validate_config(
            {"entries": [{"label": "m", "environment": "math", "source": "x", "options": deep}]}
        )

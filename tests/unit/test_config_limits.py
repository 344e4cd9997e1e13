"""No config value is unbounded, and none reaches a shell unchecked: labels and run names are
short names, paths handed to a shell are plain paths, free-form values (engine.extra_body, a
generator's config, ...) are bounded in size and depth, and YAML nested past the parser's
depth is a one-line error. Each is refused before anything runs, by `validate_config` (the
Snakefile and every command) and `rewardprof validate`. The shell itself: the rules quote
every value (tests/workflow/test_shell_injection.py)."""

from __future__ import annotations

import pytest
import yaml

from rewardprof import cli
from rewardprof.core.config import ConfigError
from rewardprof.manifest.load import load_config, validate_config

ENTRY = {"label": "m", "environment": "math", "source": "x.jsonl"}


def _err(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    message = str(info.value)
    assert "\n" not in message and len(message) < 400  # one line, whatever was given
    return message


def test_labels_and_run_names_are_short_names():
    assert validate_config({"run": "r" * 64, "entries": [dict(ENTRY, label="l" * 64)]})
    # 300 characters passed before and crashed `profile` after every rollout was done
    message = _err({"entries": [dict(ENTRY, label="l" * 300)]})
    assert message.startswith("config: entries[0].label: String should have at most 64")
    assert _err({"run": "r" * 65, "entries": [ENTRY]}).startswith("config: run: String should")
    assert "entries[0].label" in _err({"entries": [dict(ENTRY, label="a/../b")]})


@pytest.mark.parametrize("key", ["models_dir", "python"])
@pytest.mark.parametrize(
    "value", ["res$(id>X)", "res`id>X`", "a;id", "a|b", "a&&b", "a\nb", "x'y", "a>b"]
)
def test_paths_a_rule_hands_to_a_shell_are_plain(key, value):
    message = _err({"entries": [ENTRY], "engine": {key: value}})
    assert f"engine.{key}: must be a plain path" in message


def test_plain_paths_with_spaces_pass():
    cfg = validate_config(
        {"entries": [ENTRY], "engine": {"models_dir": "my models", "python": "/o p/bin/python"}}
    )
    assert cfg.engine.models_dir == "my models"


def _anchor_bomb(levels: int = 7) -> str:
    """YAML aliases of aliases: 10^levels values once expanded, a few hundred bytes as text."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + f"\nbomb: *a{levels}\n"


def test_extra_body_is_bounded_in_size_and_depth():
    bomb = yaml.safe_load(_anchor_bomb())["bomb"]  # 10^7 values: 113 s and 1.9 GB before
    message = _err({"entries": [ENTRY], "engine": {"extra_body": {"x": bomb}}})
    assert message.startswith("config: engine.extra_body: ")
    assert "YAML anchors and aliases count every time they repeat" in message
    deep: dict = {}
    node = deep
    for _ in range(3000):
        node["a"] = {}
        node = node["a"]
    message = _err({"entries": [ENTRY], "engine": {"extra_body": deep}})
    assert message == "config: engine.extra_body: nested deeper than 40 levels"
    assert validate_config({"entries": [ENTRY], "engine": {"extra_body": {"top_k": 5}}})


def test_every_free_form_value_is_bounded():
    big = "x" * ((1 << 20) + 1)
    message = _err({"entries": [ENTRY], "engine": {"serve_env": {"A": big}}})
    assert message.startswith("config: engine.serve_env: a text of 1048577 characters")
    generator = {"generator": "reasoning_gym", "task": "t", "size": 1, "config": {"k": [[[]]]}}
    node = generator["config"]
    for _ in range(50):
        node["k"] = {"k": {}}
        node = node["k"]
    message = _err({"entries": [dict(ENTRY, source=generator)]})
    assert message == "config: entries[0]: nested deeper than 40 levels"


def test_yaml_nested_3000_deep_is_one_line(tmp_path, capsys):
    path = tmp_path / "deep.yaml"
    path.write_text("entries: " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: nested too deep to read (at most 40 levels)"
    assert cli.main(["validate", "--config", str(path)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nested too deep to read" in err
    assert "Traceback" not in err and "RecursionError" not in err
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_anchor_bomb() + "entries: [{label: m, environment: math, source: x}]\n")
    assert cli.main(["validate", "--config", str(bomb)]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config has more than 500000 values" in err

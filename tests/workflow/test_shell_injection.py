"""L3: no shell receives config text. Snakemake runs each rule's command through a shell; the
config values that reach one (engine.models_dir, engine.python) are validated as plain paths
and quoted in the rule (`{...:q}`), so a value written to run a command runs nothing."""

from __future__ import annotations

import pytest
from harness import shardkit as kit
from helpers import snakemake, write_config

from rewardprof.engine.model import CONVERTER_VERSION

pytestmark = pytest.mark.workflow

ENTRIES = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2}]


def _serve_config(tmp_path, **engine):
    # serve mode with the builtin model: the model_convert rule (models_dir, engine.python in
    # its command) is part of the DAG
    cfg = {"run": "t", "num_shards": 1, "entries": ENTRIES, "engine": engine}
    return write_config(tmp_path, cfg)


@pytest.mark.parametrize(
    ("key", "value"),
    [("models_dir", "res$(id>X)"), ("python", "py$(id>X)"), ("models_dir", "res`id>X`")],
)
def test_a_command_in_a_path_is_refused_and_runs_nothing(tmp_path, key, value):
    kit.write_source(tmp_path / "data/m.jsonl", 2)
    config = _serve_config(tmp_path, **{key: value})
    for args in (("-n", "-p"), ("-p",)):  # a dry run and a plain run
        r = snakemake(tmp_path, *args, "--configfile", str(config))
        out = r.stdout + r.stderr
        assert r.returncode != 0, out[-3000:]
        refusal = [line for line in out.splitlines() if f"engine.{key}" in line]
        assert len(refusal) == 1 and "must be a plain path" in refusal[0], out[-3000:]
        assert "Traceback" not in out
    assert not list(tmp_path.rglob("X")), "the command in the config ran"
    assert not (tmp_path / "results").exists()


def test_a_path_with_a_space_reaches_the_command_as_one_word(tmp_path):
    """What validation lets through (a space is a plain path's character) is quoted: the
    printed command holds each path as one shell word. engine.python reaches the conversion
    through the environment (rules/model.smk), so no shell command holds it at all."""
    kit.write_source(tmp_path / "data/m.jsonl", 2)
    config = _serve_config(tmp_path, models_dir="my models", python="/opt/my env/bin/python")
    r = snakemake(tmp_path, "-n", "-p", "--configfile", str(config))
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    key = f"smollm2-135m-c{CONVERTER_VERSION}"
    assert f"--out 'my models/{key}' --stamp 'my models/{key}.json'" in r.stdout
    assert f"> 'my models/.logs/{key}.log'" in r.stdout
    commands = [line for line in r.stdout.splitlines() if line.startswith("Shell command:")]
    assert commands and not any("/opt/my env" in line for line in commands), commands

"""A partial config file validated as Snakemake uses it (merged onto config/config.yaml), and a
target written after `--configfile` recognised for what it is."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rewardprof.core.config import ConfigError
from rewardprof.core.overrides import misplaced_target
from rewardprof.manifest.load import load_config, load_overlaid, overlay

REPO = Path(__file__).resolve().parents[2]


def test_overlay_merges_mappings_key_by_key_and_replaces_lists():
    base = {"run": "demo", "sampling": {"temperature": 1.0, "max_tokens": 512}, "a": [1, 2]}
    over = {"sampling": {"max_tokens": 64}, "a": [3]}
    assert overlay(base, over) == {
        "run": "demo",
        "sampling": {"temperature": 1.0, "max_tokens": 64},
        "a": [3],
    }


def test_a_partial_file_validates_merged_onto_the_default_config(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the default config's sources are relative to the checkout
    part = tmp_path / "part.yaml"
    part.write_text("run: other\nnum_shards: 3\nsampling: {max_tokens: 64}\n")
    with pytest.raises(ConfigError, match="entries"):
        load_config(part)  # alone it lacks entries
    cfg = load_overlaid("config/config.yaml", [part])
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    assert (cfg.run, cfg.num_shards, cfg.sampling.max_tokens) == ("other", 3, 64)
    assert [e.label for e in cfg.entries] == [e["label"] for e in default["entries"]]


def test_a_target_after_configfile_is_named_with_the_right_order(tmp_path):
    given = [tmp_path / "my.yaml", tmp_path / "results" / "demo" / "profile" / "summary.json"]
    line = misplaced_target(given, tmp_path)
    assert line is not None and "\n" not in line
    assert "snakemake results/demo/profile/summary.json --configfile my.yaml" in line
    assert misplaced_target([tmp_path / "my.yaml", tmp_path / "more.json"], tmp_path) is None
    # a config written into a run directory (grpo-step --serve's refit.yaml) is a config
    refit = tmp_path / "results" / "demo" / "grpo_step" / "refit.yaml"
    assert misplaced_target([refit], tmp_path) is None

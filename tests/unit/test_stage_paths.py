"""The stage contract's pieces: the shard position, the paths built from RunLayout, the prior
file's two versions (store/priors.py) as the stages read them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from rewardprof.decisions.priors.posterior import MixturePrior
from rewardprof.stages import FirstRoundPaths, MergePaths, ProfilePaths, RolloutPaths
from rewardprof.stages.adaptive_settings import load_priors
from rewardprof.store.layout import RunLayout
from rewardprof.store.priors import read_prior_file
from rewardprof.store.shards import ShardPosition


def test_a_shard_position_is_index_count_and_its_tag():
    shard = ShardPosition(2, 5)
    assert shard.tag == "2-of-5" and tuple(shard) == (2, 5)
    assert RunLayout("results/r").shard_rollouts(*shard).name == "2-of-5.parquet"
    for index, count in ((5, 5), (-1, 5)):
        with pytest.raises(ValueError, match=r"is not in \[0, 5\)"):
            ShardPosition(index, count)


def test_paths_from_the_layout_are_the_rules_files():
    layout = RunLayout("results/r", 3)
    shard = ShardPosition(1, 3)
    rollout = RolloutPaths.from_layout(layout, shard, bayes=True)
    assert rollout.out == layout.shard_rollouts(1) and rollout.prior == layout.adaptive_prior
    assert rollout.run_dir is layout and RolloutPaths.from_layout(layout, shard).prior is None
    first = FirstRoundPaths.from_layout(layout, shard)
    assert first.out == layout.first_round(1) and first.tasks == rollout.tasks
    profile = ProfilePaths.from_layout(layout, adaptive=True)
    assert profile.out.summary == layout.profile_summary
    assert profile.savings == layout.adaptive_savings
    with pytest.raises(TypeError):  # every required field is required
        RolloutPaths(tasks=rollout.tasks, journal=rollout.journal, out=rollout.out)
    with pytest.raises(TypeError, match=r"no flag \['adaptive'\]"):  # a flag no field reads
        RolloutPaths.from_layout(layout, shard, adaptive=True)
    assert RolloutPaths.layout_flags() == ["bayes"] and FirstRoundPaths.layout_flags() == []
    with pytest.raises(ValueError, match="the shard count is not known"):
        MergePaths.from_layout(RunLayout("results/r"))
    with pytest.raises(dataclasses.FrozenInstanceError):  # every paths class is frozen
        rollout.out = layout.tasks  # type: ignore[misc]


def test_the_prior_file_reads(tmp_path):
    mixture = MixturePrior(0.2, 0.3, 1.5, 2.5, tasks=40).as_dict()
    assert load_priors(None) is None
    current = tmp_path / "current.json"
    body = {"labels": {"m": mixture}, "label_priors": {}, "warm_start": {"task_keys": {"t": "m"}}}
    current.write_text(json.dumps(body))
    read = read_prior_file(current)
    assert read.label_priors == {} and read.task_keys == {"t": "m"}

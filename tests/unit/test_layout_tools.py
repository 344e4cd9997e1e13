"""What store/layout.py names for the tools around a run: the shard count `rewardprof check`
and `rewardprof status` read a run directory at (`current_num_shards`: the layout written last,
the merge report included), the fleet's files and grpo-step's."""

from __future__ import annotations

import json
import os

from rewardprof.engine.fleet import FleetFiles
from rewardprof.store.layout import FleetLayout, GrpoStepLayout, RunLayout, current_num_shards


def _touch(path, mtime: float, text: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.utime(path, (mtime, mtime))


def _merge_report(layout: RunLayout, n: int, mtime: float) -> None:
    shards = [str(p) for p in layout.all_shard_rollouts(n)]
    _touch(layout.merge_report, mtime, json.dumps({"shards": shards}))


def test_no_file_names_a_layout(tmp_path):
    layout = RunLayout(tmp_path)
    assert current_num_shards(layout) is None
    _touch(layout.tasks, 100.0)
    assert current_num_shards(layout) is None


def test_one_layout_whatever_the_times(tmp_path):
    layout = RunLayout(tmp_path)
    _touch(layout.shard_tasks(0, 3), 300.0)
    _touch(layout.shard_rollouts(0, 3), 100.0)
    _touch(layout.shard_status(1, 3), 200.0)
    assert current_num_shards(layout) == 3


def test_a_reshard_under_way_wins_over_the_older_merge(tmp_path):
    layout = RunLayout(tmp_path)
    for i in range(2):
        _touch(layout.shard_tasks(i, 2), 100.0)
        _touch(layout.shard_rollouts(i, 2), 110.0)
    _merge_report(layout, 2, 120.0)
    assert current_num_shards(layout) == 2
    _touch(layout.shard_tasks(0, 3), 200.0)  # num_shards 2 -> 3: the new shard files first
    assert current_num_shards(layout) == 3
    _touch(layout.shard_status(0, 3), 210.0)
    _merge_report(layout, 3, 300.0)  # the reshard merged: its report is the newest file
    _touch(layout.shard_tasks(1, 2), 250.0)  # a stale file of the old layout, rewritten
    assert current_num_shards(layout) == 3


def test_heartbeats_alone_name_the_layout_a_job_runs(tmp_path):
    layout = RunLayout(tmp_path)
    _touch(layout.shard_tasks(0, 2), 100.0)
    _touch(layout.shard_status(0, 4), 150.0)
    assert current_num_shards(layout) == 4


def test_a_merge_report_of_mixed_layouts_names_none(tmp_path):
    layout = RunLayout(tmp_path)
    _touch(layout.shard_rollouts(0, 2), 100.0)
    shards = [str(layout.shard_rollouts(0, 2)), str(layout.shard_rollouts(0, 3))]
    _touch(layout.merge_report, 200.0, json.dumps({"shards": shards}))
    assert current_num_shards(layout) == 2


def test_the_fleets_files_are_named_by_the_run_layout(tmp_path):
    """store/layout.py names fleet/'s files; the engine's fleet takes them as its FleetFiles."""
    fleet = FleetLayout(RunLayout("results/x"))
    names = {
        "endpoints": fleet.endpoints,
        "state": fleet.state,
        "stop": fleet.stop,
        "log": fleet.log,
        "sbatch": fleet.sbatch_script,
        "replica": fleet.replica(2),
        "replica_log": fleet.replica_log(2),
        "slurm_log": fleet.slurm_log("%j"),
    }
    assert {k: str(v) for k, v in names.items()} == {
        "endpoints": "results/x/fleet/endpoints.json",
        "state": "results/x/fleet/fleet.json",
        "stop": "results/x/fleet/stop",
        "log": "results/x/fleet/fleet.log",
        "sbatch": "results/x/fleet/fleet.sbatch",
        "replica": "results/x/fleet/replicas/2.json",
        "replica_log": "results/x/fleet/replica-2.log",
        "slurm_log": "results/x/fleet/slurm-%j.log",
    }
    assert isinstance(fleet, FleetFiles)  # structurally: the engine imports nothing of store


def test_grpo_steps_files_are_named_by_the_run_layout():
    step = GrpoStepLayout(RunLayout("results/x"))
    names = [step.result, step.model, step.refit_config, step.engine_log("before")]
    assert [str(p) for p in names] == [
        "results/x/grpo_step.json",
        "results/x/grpo_step/model",
        "results/x/grpo_step/refit.yaml",
        "results/x/logs/grpo_step/engine-before.log",
    ]

"""L0: the Slurm job script of a shared fleet (tools/fleet.py)."""

from __future__ import annotations

import shlex

import pytest

from rewardprof.engine.fleet import to_publish
from rewardprof.manifest.load import validate_config
from rewardprof.tools.fleet import sbatch_argv, sbatch_script


def _cfg(**engine):
    return validate_config(
        {
            "run": "x",
            "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
            "engine": {"mode": "endpoint", "host": "0.0.0.0", **engine},
            "fleet": {"replicas": 3, "launcher": "slurm", "sbatch_args": ["--gpus-per-task=1"]},
        }
    )


def test_fleet_sbatch_script_runs_one_replica_per_task(tmp_path):
    cfg = _cfg(endpoints_file="results/x/fleet/endpoints.json")
    script = sbatch_script(cfg, "c.yaml", tmp_path / "results" / "x")
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash" and "#SBATCH --ntasks=3" in lines
    assert "#SBATCH --gpus-per-task=1" in lines
    srun = shlex.split(lines[-1])
    assert srun[:4] == ["exec", "srun", "--kill-on-bad-exit=0", "bash"]
    inner = srun[-1]  # each task's own shell expands its rank
    assert inner.endswith('--rank "$SLURM_PROCID"') and " fleet serve --config " in inner


def test_the_fleet_log_path_survives_a_run_directory_with_a_space(tmp_path):
    """sbatch reads a #SBATCH line's words itself: a path with a space would be cut there.
    The log's path goes on sbatch's command line instead, one argument."""
    run_dir = tmp_path / "my runs" / "x"
    script = sbatch_script(_cfg(endpoints_file="results/x/fleet/endpoints.json"), "c.yaml", run_dir)
    assert not any(line.startswith("#SBATCH --output") for line in script.splitlines())
    argv = sbatch_argv(run_dir, run_dir / "fleet" / "fleet.sbatch")
    assert argv[:2] == ["sbatch", "--parsable"]
    assert argv[2] == f"--output={run_dir.resolve()}/fleet/slurm-%j.log"
    assert argv[3] == str(run_dir / "fleet" / "fleet.sbatch")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "127.0.1.1"])
def test_a_slurm_fleet_bound_to_loopback_is_refused_naming_the_fix(host):
    """Its replicas run on compute nodes: a loopback URL would reach no rollout job elsewhere."""
    with pytest.raises(Exception) as err:
        _cfg(endpoints_file="results/x/fleet/endpoints.json", host=host)
    assert f"engine.host: {host} with fleet.launcher slurm" in str(err.value)
    assert "set engine.host: 0.0.0.0" in str(err.value)


def test_the_published_list_never_empties_while_the_fleet_runs():
    a, b = "http://n1:8000/v1", "http://n2:8000/v1"
    assert to_publish([], None) == []  # starting: nothing ready yet
    assert to_publish([a, b], [a]) == [a, b]
    assert to_publish([b], [a, b]) == [b]  # one died: dropped, another still serves
    assert to_publish([], [b]) == [b]  # the last one restarting: the list stays
    assert to_publish([a], [b]) == [a]  # back (or another ready): the new list

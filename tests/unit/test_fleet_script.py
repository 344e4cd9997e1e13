"""L0: the Slurm job script of a shared fleet (tools/fleet.py)."""

from __future__ import annotations

import shlex

from rewardprof.manifest.load import validate_config
from rewardprof.tools.fleet import sbatch_script


def _cfg(**engine):
    return validate_config(
        {
            "run": "x",
            "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
            "engine": {"mode": "endpoint", **engine},
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

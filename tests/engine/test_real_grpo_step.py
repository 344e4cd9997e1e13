"""L3: one real GRPO optimizer step of the embedded model (torch on CPU, the engine's interpreter)
on the checked-in two-row fixture (one accepted, one rejected rollout) and on a batch whose only
task the profile dropped (a control that must not move the policy)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from engine_helpers import MODEL, models_dir, require_engine  # noqa: F401  # fixture

from rewardprof.engine.model import model_key

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "grpo" / "two_rows.jsonl"


def _grpo_step(run_dir: Path, batch: Path, model: Path) -> dict:
    env = dict(os.environ, REWARDPROF_ENGINE_PYTHON=require_engine())
    cmd = [sys.executable, "-m", "rewardprof.cli", "grpo-step", str(run_dir)]
    proc = subprocess.run(
        [*cmd, "--batch", str(batch), "--model", str(model), "--seed", "7"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads((run_dir / "grpo_step.json").read_text())


@pytest.fixture(scope="module")
def two_rows(models_dir, tmp_path_factory):  # noqa: F811
    model = models_dir / model_key(MODEL)
    runs = [tmp_path_factory.mktemp(f"run{i}") for i in range(2)]
    return [_grpo_step(run, FIXTURE, model) for run in runs]


def test_two_row_fixture_one_step_exact_rewards_signed_advantages(two_rows):
    out = two_rows[0]
    assert (out["reward_min"], out["reward_max"], out["reward_mean"]) == (0.0, 1.0, 0.5)
    [task] = out["tasks"]
    assert task["kept"] and task["advantages"][0] > 0 > task["advantages"][1]
    assert out["steps"] == 1
    assert math.isfinite(out["loss"])
    assert math.isfinite(out["grad_norm"]) and out["grad_norm"] > 0
    assert out["lr"] > 0
    assert (out["n_kept_groups"], out["n_dropped_groups"]) == (1, 0)
    # the step moved the policy the way the rewards say: the accepted completion gained
    # probability, the rejected one lost it
    assert out["logprob_after"][0] > out["logprob_before"][0]
    assert out["logprob_after"][1] < out["logprob_before"][1]


def test_same_seed_same_numbers_to_1e6(two_rows):
    a, b = two_rows
    for key in ("loss", "grad_norm", "lr", "reward_mean"):
        assert a[key] == pytest.approx(b[key], abs=1e-6)
    for x, y in zip(a["logprob_after"], b["logprob_after"], strict=True):
        assert x == pytest.approx(y, abs=1e-6)


def test_a_dropped_only_batch_has_zero_advantages_and_zero_gradient(models_dir, tmp_path):  # noqa: F811
    rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    batch = tmp_path / "dropped.jsonl"
    batch.write_text("".join(json.dumps(dict(r, kept=False)) + "\n" for r in rows))
    out = _grpo_step(tmp_path / "run", batch, models_dir / model_key(MODEL))
    [task] = out["tasks"]
    assert not task["kept"] and task["advantages"] == [0.0, 0.0]
    assert out["grad_norm"] == 0.0
    assert (out["n_kept_groups"], out["n_dropped_groups"]) == (0, 1)
    assert out["logprob_after"] == pytest.approx(out["logprob_before"], abs=1e-6)

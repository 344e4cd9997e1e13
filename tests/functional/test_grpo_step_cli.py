"""`rewardprof grpo-step` without the training environment: one line naming make install-train."""

import os
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "grpo" / "two_rows.jsonl"


def test_without_torch_the_command_prints_one_line_naming_make_install_train(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    env = dict(os.environ, REWARDPROF_ENGINE_PYTHON=sys.executable)  # the core venv: no torch
    proc = subprocess.run(
        [sys.executable, "-m", "rewardprof.cli", "grpo-step", str(tmp_path / "run")]
        + ["--batch", str(FIXTURE), "--model", str(model)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "make install-train" in lines[0], proc.stderr
    assert not (tmp_path / "run" / "grpo_step.json").exists()

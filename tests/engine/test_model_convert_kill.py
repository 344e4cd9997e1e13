"""A real conversion of the builtin model (the engine's interpreter, torch + transformers)
killed with SIGKILL while it writes: no model directory appears, half-written or otherwise, and
the next conversion removes the dead one's temporary sibling."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from engine_helpers import MODEL, REPO, require

from rewardprof.engine.model import TOOLS, engine_python, model_key, sweep_stale_temporaries

pytestmark = [pytest.mark.engine, pytest.mark.slow]


@pytest.mark.timeout(2400)  # a real conversion: ~1 min idle, 10+ min on a loaded machine
def test_sigkill_mid_conversion_leaves_no_model_dir(tmp_path):
    python = engine_python()
    require("the engine's interpreter", python != sys.executable, "scripts/install-engine.sh")
    out = tmp_path / "models" / model_key(MODEL)
    out.parent.mkdir()
    job = subprocess.Popen(
        [python, str(TOOLS / "convert_gguf.py"), "--builtin", MODEL, "--out", str(out)],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tmp_glob = f".{out.name}.tmp-*"
    try:
        # the gate: the converter has begun writing its temporary sibling (weights underway)
        deadline = time.monotonic() + 1800  # liveness only: a loaded machine converts slowly
        while not list(out.parent.glob(tmp_glob)):
            assert job.poll() is None, "the conversion ended before it wrote anything"
            assert time.monotonic() < deadline, "the conversion never started writing"
            time.sleep(0.05)
        job.send_signal(signal.SIGKILL)
    finally:
        job.wait()
    assert job.returncode == -signal.SIGKILL
    assert not out.exists(), "a killed conversion left a model directory"
    assert list(out.parent.glob(tmp_glob))  # its temporary sibling, named by host and pid
    removed = sweep_stale_temporaries(out)
    assert removed and not list(out.parent.glob(tmp_glob))
    assert not out.exists()

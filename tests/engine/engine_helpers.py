"""Helpers shared by the engine tests (fake and real vLLM)."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import require_piece

from rewardprof.engine.host import describe_processes, port_is_free, processes_with_env
from rewardprof.engine.model import MARKER, convert_builtin, engine_python, model_key
from rewardprof.engine.server import probe_engine
from rewardprof.engine.session import EngineError
from rewardprof.manifest.load import validate_config
from rewardprof.stages import MaterializePaths, ShardPaths, materialize, shard
from rewardprof.store.shards import ShardPosition

FAKE_VLLM = Path(__file__).resolve().parent / "fake_vllm"
REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m"
QUESTIONS = [
    ("What is 2 + 3? Put the answer in \\boxed{}.", "5"),
    ("What is 7 * 6? Put the answer in \\boxed{}.", "42"),
]
# skip on a laptop, fail under CI=true: the one rule, from tests/helpers.py
require = require_piece


def new_mark() -> tuple[str, str, str]:
    """(env name, value, 'NAME=value') to tag every process of one server launch."""
    value = uuid.uuid4().hex[:12]
    return "RP_TEST_MARK", value, f"RP_TEST_MARK={value}"


def fake_engine_python(tmp: Path, isolated: bool = False) -> str:
    """An 'interpreter' whose `vllm` is the fake in fake_vllm/ (or, isolated, has no vllm)."""
    path = tmp / ("python-novllm" if isolated else "python-fakevllm")
    if isolated:
        path.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    else:
        path.write_text(
            f"#!/bin/sh\nexport PYTHONPATH={FAKE_VLLM}${{PYTHONPATH:+:$PYTHONPATH}}\n"
            f'exec {sys.executable} "$@"\n'
        )
    path.chmod(0o755)
    return str(path)


def base_config(**engine) -> dict:
    return {
        "run": "t",
        "num_shards": 1,
        "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
        "engine": {"mode": "serve", **engine},
    }


# ---- the real engine ---------------------------------------------------------------------


def require_engine(what: str = "the vLLM CPU engine") -> str:
    """The engine's interpreter, once it imports vLLM (skip on a laptop, fail under CI)."""
    python = engine_python()
    try:
        probe_engine(python)
        ok, why = True, ""
    except EngineError as exc:
        ok, why = False, str(exc)
    require(what, ok, why)
    return python


@pytest.fixture(scope="session")
def models_dir() -> Path:
    """The converted builtin model (made once; shared with the workflow's resources/)."""
    python = require_engine()
    d = Path(os.environ.get("REWARDPROF_TEST_MODELS_DIR") or REPO / "resources" / "models")
    if not (d / model_key(MODEL) / MARKER).is_file():
        convert_builtin(MODEL, d / model_key(MODEL), python)
    return d


def assert_gone(needle: str, port: int | None, job_log: Path | None = None) -> None:
    # The job has sent SIGKILL to whatever was left before it exited; the kernel tearing down a
    # multi-GB vLLM process on a loaded 2-core VM can still take seconds, so the window is wide
    # (it costs nothing when they are gone). What is left is described, with the job's own log.
    deadline = time.monotonic() + 60
    while processes_with_env(needle) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = processes_with_env(needle)
    assert left == [], f"vLLM processes outlived their job: {describe_processes(left)}\n" + (
        job_log.read_text()[-3000:] if job_log is not None else ""
    )
    assert port is None or port_is_free("127.0.0.1", port), f"port {port} is still bound"


def make_shard(tmp: Path, k: int) -> tuple[dict, Path]:
    rows = [
        {
            "responses_create_params": {"input": [{"role": "user", "content": q}]},
            "expected_answer": a,
        }
        for q, a in QUESTIONS
    ]
    (tmp / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = base_config()
    data["entries"] = [
        {"label": "m", "environment": "math", "source": str(tmp / "m.jsonl"), "num_repeats": k}
    ]
    tasks = tmp / "tasks.parquet"
    materialize.run(
        validate_config(data), MaterializePaths(tasks=tasks, report=tmp / "report.json")
    )
    shard.run(None, ShardPaths(tasks=tasks, out=tmp / "shard.parquet", shard=ShardPosition(0, 1)))
    return data, tmp / "shard.parquet"

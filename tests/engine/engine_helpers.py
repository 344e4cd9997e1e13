"""Helpers shared by the engine tests (fake and real vLLM)."""

from __future__ import annotations

import os
import sys
import uuid
from pathlib import Path

import pytest

FAKE_VLLM = Path(__file__).resolve().parent / "fake_vllm"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require(name: str, available: bool, how: str = "") -> None:
    """Skip on a laptop, fail under CI=true (same rule as tests/conftest.py's require_piece)."""
    if available:
        return
    msg = f"{name} is not available{': ' + how if how else ''}"
    if IN_CI:
        pytest.fail(f"CI=true: {msg}")
    pytest.skip(msg)


def processes_with_env(needle: str) -> list[int]:
    """Pids whose environment contains the entry `needle` (e.g. 'MARK=abc')."""
    want = needle.encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if want in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


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
        path.write_text(f"#!/bin/sh\nexport PYTHONPATH={FAKE_VLLM}${{PYTHONPATH:+:$PYTHONPATH}}\n"
                        f'exec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return str(path)


def base_config(**engine) -> dict:
    return {"run": "t", "num_shards": 1,
            "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
            "engine": {"mode": "serve", **engine}}

"""A core-only install (`pip install -e .`) given a config with an environment whose verifier
library is an extra: `rewardprof validate` and `snakemake -n` fail with one line naming the
install command, no traceback. The missing package is made missing by a test-side
sitecustomize that every Python process of the run imports first (a meta-path finder that
refuses the package), as a core-only venv would lack it; NLTK's data is hidden the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, endpoint_config, math_row, snakemake, write_config

pytestmark = pytest.mark.workflow

_SITECUSTOMIZE = """import os, sys
_BLOCKED = set(filter(None, os.environ.get("RP_TEST_BLOCK_PACKAGES", "").split(",")))
class _Uninstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Uninstalled())
if os.environ.get("RP_TEST_NLTK_DATA_ONLY"):
    import nltk.data
    nltk.data.path[:] = [os.environ["RP_TEST_NLTK_DATA_ONLY"]]
"""
EXTRA = "pip install -e '.[environments]'"


def _rows(name: str) -> list[dict]:
    path = REPO / "tests" / "data" / "environments" / f"{name}.jsonl"
    return [json.loads(line)["row"] for line in path.read_text().splitlines() if line.strip()]


def _entry(environment: str, tmp: Path, rows: list[dict] | None = None) -> dict:
    data = tmp / "data" / f"{environment}.jsonl"
    data.parent.mkdir(exist_ok=True)
    rows = _rows(environment) if rows is None else rows
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"label": "e", "environment": environment, "source": str(data), "num_repeats": 2}


# IFBench's words:start_verb reads NLTK's tokenizer and POS tagger (data, not a package)
NEEDS_DATA = {
    "prompt": "Start with a verb.",
    "instruction_id_list": ["words:start_verb"],
    "kwargs": [{}],
}
GENERATOR = {
    "label": "gen",
    "environment": "reasoning_gym",
    "source": {"generator": "reasoning_gym", "task": "basic_arithmetic", "size": 3},
}
# case: (entry maker, packages made missing, NLTK data made missing, the install line)
CASES = {
    "reasoning_gym": (lambda t: _entry("reasoning_gym", t), "reasoning_gym", False, EXTRA),
    "reasoning_gym_generator": (lambda t: GENERATOR, "reasoning_gym", False, EXTRA),
    "instruction_following": (
        lambda t: _entry("instruction_following", t),
        "if_verifiable",
        False,
        EXTRA,
    ),
    "instruction_following_nltk": (
        lambda t: _entry("instruction_following", t),
        "nltk",
        False,
        EXTRA,
    ),
    "instruction_following_data": (
        lambda t: _entry("instruction_following", t, [NEEDS_DATA]),
        "",
        True,
        "rewardprof install-nltk-data",
    ),
}


def _env(tmp: Path, blocked: str, hide_data: bool) -> dict[str, str]:
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(_SITECUSTOMIZE)
    env = {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "RP_TEST_BLOCK_PACKAGES": blocked,
    }
    if hide_data:
        (tmp / "no_nltk_data").mkdir()
        env["RP_TEST_NLTK_DATA_ONLY"] = str(tmp / "no_nltk_data")
    return env


def _one_clear_line(output: str, expected: str) -> None:
    assert "Traceback" not in output, output[-3000:]
    assert any(expected in line for line in output.splitlines()), output[-3000:]


@pytest.mark.parametrize("case", list(CASES))
def test_missing_extra_is_one_line_naming_the_install_command(tmp_path, case):
    make_entry, blocked, hide_data, expected = CASES[case]
    cfg = endpoint_config("http://127.0.0.1:9/v1", [make_entry(tmp_path)], num_shards=1)
    config = write_config(tmp_path, cfg)
    env = {**os.environ, **_env(tmp_path, blocked, hide_data)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    validate = subprocess.run(
        [str(Path(sys.executable).parent / "rewardprof"), "validate", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert validate.returncode != 0
    _one_clear_line(validate.stdout + validate.stderr, expected)
    if hide_data:
        return  # NLTK data is read per row: validate says it; the run's materialize fails on it
    dry = snakemake(tmp_path, "-n", "--configfile", str(config), env=_env_again(tmp_path, env))
    assert dry.returncode != 0
    _one_clear_line(dry.stdout + dry.stderr, expected)


def _env_again(tmp: Path, env: dict[str, str]) -> dict[str, str]:
    return {
        k: env[k]
        for k in ("PYTHONPATH", "RP_TEST_BLOCK_PACKAGES", "RP_TEST_NLTK_DATA_ONLY")
        if k in env
    }


def test_the_reports_plots_are_checked_before_the_first_job(tmp_path):
    """A core-only install without matplotlib: the run stops before its first job with one
    line naming the report extra (it used to run every rollout, then fail in the report)."""
    data = tmp_path / "data" / "m.jsonl"
    data.parent.mkdir()
    data.write_text(json.dumps(math_row("What is 1 + 1?", "2")) + "\n")
    entry = {"label": "m", "environment": "math", "source": str(data), "num_repeats": 2}
    config = write_config(tmp_path, endpoint_config("http://127.0.0.1:9/v1", [entry]))
    env = _env(tmp_path, "matplotlib", False)
    run = snakemake(tmp_path, "--configfile", str(config), env=env)
    assert run.returncode != 0
    _one_clear_line(run.stdout + run.stderr, "pip install -e '.[report]'")
    assert "matplotlib" in run.stderr
    assert not (tmp_path / "results" / "t" / "materialize").exists()  # no job ran
    # without the report step the same install runs (here: up to the endpoint's preflight)
    omit = snakemake(tmp_path, "--omit-from", "report", "--configfile", str(config), env=env)
    assert "[report]" not in omit.stdout + omit.stderr

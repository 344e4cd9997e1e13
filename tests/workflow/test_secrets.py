"""Secrets: the API key comes only from the environment and appears in no file the run writes:
results, logs, .snakemake metadata, the Snakemake report, the terminal output."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

import pytest
from harness import shardkit as kit
from helpers import endpoint_config, snakemake, write_config

from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow

VAR = "REWARDPROF_TEST_API_KEY"


def _files_containing(root: Path, needle: bytes) -> list[str]:
    found, scanned = [], 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            scanned += 1
            if needle in path.read_bytes():
                found.append(str(path.relative_to(root)))
    assert scanned > 10  # the grep looked at a real run
    return found


def test_api_key_never_written(tmp_path):
    key = f"sk-SENTINEL-{secrets.token_hex(12)}"
    wrong = f"sk-WRONG-SENTINEL-{secrets.token_hex(12)}"
    kit.write_source(tmp_path / "data/m.jsonl", 3)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2}]
    outputs = []
    with FakeOpenAI(kit.answer, api_key=key, echo_key=True) as server:
        cfg = endpoint_config(server.base_url, entries, engine={"api_key_env": VAR})
        config = write_config(tmp_path, cfg)
        r = snakemake(tmp_path, "--configfile", str(config), env={VAR: key})
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, outputs[-1][-3000:]
        # the server insisted on the key: every request carried it
        assert server.stats["auth_ok"] >= 2 and server.stats["auth_failed"] == 0
        r = snakemake(
            tmp_path, "--report", "report.zip", "--configfile", str(config), env={VAR: key}
        )
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, outputs[-1][-3000:]
        assert (tmp_path / "report.zip").stat().st_size > 1000
        # a wrong key (which this server quotes back in its 401 body) fails before any job,
        # naming the variable, not the key
        r = snakemake(
            tmp_path, "--forcerun", "rollout", "--configfile", str(config), env={VAR: wrong}
        )
        outputs.append(r.stdout + r.stderr)
        assert r.returncode != 0
        assert f"rejected the API key from ${VAR} (HTTP 401)" in outputs[-1]
        # and inside a rollout job (the controller's check skipped) it is the same line; the
        # journal goes, so the jobs have rollouts to generate (a job with nothing to generate
        # contacts no endpoint)
        shutil.rmtree(tmp_path / "results/t/rollouts/journal")
        r = snakemake(
            tmp_path,
            "--forcerun",
            "rollout",
            "--configfile",
            str(config),
            env={VAR: wrong, "REWARDPROF_NO_PREFLIGHT": "1"},
        )
        outputs.append(r.stdout + r.stderr)
        assert r.returncode != 0
        assert f"rejected the API key from ${VAR} (HTTP 401)" in outputs[-1]
    assert (tmp_path / "results/t/profile/summary.json").exists()
    assert VAR in config.read_text()  # the config names the variable ...
    for needle in (key, wrong):  # ... and nothing holds its value
        assert _files_containing(tmp_path, needle.encode()) == []
        assert not [o for o in outputs if needle in o]
    import zipfile

    with zipfile.ZipFile(tmp_path / "report.zip") as z:
        for name in z.namelist():
            assert key.encode() not in z.read(name), name

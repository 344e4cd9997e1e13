"""Each stage reads its config from results/<run>/config/<stage>.json: the commands stay short
(a 50-entry manifest), only the sections a stage reads rerun it, the config of the run is kept
in the run directory, and a base_url's user:password is in no file of the run."""

from __future__ import annotations

import json
import re

import pytest
from helpers import endpoint_config, math_row, snakemake, write_config, write_jsonl

from rewardprof.testing.fake_server import FakeOpenAI, scripted

pytestmark = pytest.mark.workflow

# the URL's password comes from the environment: a config file may not hold one
PASSWORD_ENV = {"RP_SWEEP_PW": "pa55word"}


def _job_counts(stdout: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)$", stdout, flags=re.M)}


def _dry_run_counts(workdir, config, override: str) -> dict[str, int]:
    """The jobs a dry run with `--config override` would run, per rule."""
    r = snakemake(
        workdir, "-n", "--configfile", str(config), "--config", override, env=PASSWORD_ENV
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return _job_counts(r.stdout)


def test_rollout_command_is_short_for_a_50_entry_manifest(tmp_path):
    write_jsonl(tmp_path / "data" / "m.jsonl", [math_row("What is 1 + 1?", "2")])
    entries = [
        {
            "label": f"entry_{i:02d}_with_a_long_descriptive_label",
            "environment": "math",
            "source": "data/m.jsonl",
            "num_repeats": 4,
        }
        for i in range(50)
    ]
    cfg = write_config(tmp_path, endpoint_config("http://127.0.0.1:9/v1", entries))
    r = snakemake(tmp_path, "-n", "-p", "--configfile", str(cfg))
    assert r.returncode == 0, r.stderr[-2000:]
    commands = [line for line in r.stdout.splitlines() if "rewardprof " in line]
    rollout = [c for c in commands if "rewardprof rollout" in c]
    assert len(rollout) == 2
    assert max(len(c) for c in rollout) < 400, rollout
    assert max(len(c) for c in commands) < 600, commands  # merge names every shard: 2 here
    assert "entry_49" not in r.stdout.split("Job stats:")[-1]  # no config on any command line


def test_config_files_rerun_only_their_stages_and_keep_no_password(tmp_path):
    rows = [math_row(f"What is {i} + {i}?", str(2 * i)) for i in range(4)]
    write_jsonl(tmp_path / "data" / "m.jsonl", rows)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2}]
    with FakeOpenAI(scripted({}, default="\\boxed{0}")) as server:
        url = server.base_url.replace("http://", "http://sweep:${RP_SWEEP_PW}@")
        cfg_dict = endpoint_config(url, entries)
        cfg = write_config(tmp_path, cfg_dict)
        r = snakemake(tmp_path, "--configfile", str(cfg), env=PASSWORD_ENV)
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        assert server.stats["requests"] > 0
        config_dir = tmp_path / "results/t/config"
        names = sorted(p.name for p in config_dir.iterdir())
        stages = ["export", "full", "materialize", "profile", "rollout"]
        assert names == [f"{stage}.json" for stage in stages]
        full = json.loads((config_dir / "full.json").read_text())
        assert full["entries"][0]["label"] == "m" and full["num_shards"] == 2
        assert full["engine"]["base_url"].startswith("http://***@127.0.0.1:")
        written = [*(tmp_path / "results").rglob("*"), *(tmp_path / ".snakemake").rglob("*")]
        leaked = [str(p) for p in written if p.is_file() and b"pa55word" in p.read_bytes()]
        assert leaked == []
        assert "pa55word" not in r.stdout + r.stderr

        # a profile key reruns profile, export and report, and no rollout
        counts = _dry_run_counts(tmp_path, cfg, "profile={pass_at_k: [1, 2]}")
        assert counts.get("rollout", 0) == 0 and counts.get("materialize", 0) == 0, counts
        # the config files rewritten: profile, export, full
        assert counts["profile"] == 1 and counts["stage_config"] == 3, counts
        # a sampling key reruns the rollouts (their file changed), not materialize
        counts = _dry_run_counts(tmp_path, cfg, "sampling={max_tokens: 99}")
        assert counts["rollout"] == 2 and counts.get("materialize", 0) == 0, counts

"""L3 (local): the real Snakefile end to end against a scripted fake OpenAI-compatible server."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pandas as pd
import psutil
import pyarrow.parquet as pq
import pytest
from helpers import WITHOUT_EXPORT, endpoint_config, math_row, snakemake, write_config, write_jsonl

from rewardprof.store.journal import scan_journal
from rewardprof.testing.fake_server import FakeOpenAI, scripted

pytestmark = pytest.mark.workflow

ANSWERS = {"2 + 3": "The sum is \\boxed{5}.", "7 * 6": "I think it is \\boxed{41}."}


def _two_rows(tmp_path: Path) -> list[dict]:
    write_jsonl(
        tmp_path / "data" / "m.jsonl",
        [math_row("What is 2 + 3?", "5"), math_row("What is 7 * 6?", "42")],
    )
    return [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 4}]


def test_two_row_fixture_exact_profile(tmp_path):
    with FakeOpenAI(scripted(ANSWERS)) as server:
        cfg = write_config(tmp_path, endpoint_config(server.base_url, _two_rows(tmp_path)))
        r = snakemake(tmp_path, "--configfile", str(cfg))
        assert r.returncode == 0, r.stderr[-3000:]
        # n=K grouping: one request per task, K choices each
        assert server.stats["ok_requests"] == 2
        assert server.stats["ok_choices"] == 8
    prof = pd.read_parquet(tmp_path / "results/t/profile/tasks.parquet").set_index("task_index")
    assert prof.loc[0, "mean/reward"] == 1.0 and prof.loc[1, "mean/reward"] == 0.0
    assert prof.loc[0, "num_rollouts"] == 4 and prof.loc[1, "num_rollouts"] == 4
    assert (prof["missing_num_rollouts"] == 0).all()
    assert (prof["num_failed"] == 0).all()
    assert json.loads(prof.loc[0, "sample"])["expected_answer"] == "5"
    summary = json.loads((tmp_path / "results/t/profile/summary.json").read_text())
    assert summary["overall"]["mean_reward"] == 0.5
    assert summary["labels"][0]["share_pass_rate_1"] == 0.5
    lines = (tmp_path / "results/t/profile/tasks.jsonl").read_text().splitlines()
    assert [json.loads(x)["mean/reward"] for x in lines] == [1.0, 0.0]
    by_label = pd.read_parquet(tmp_path / "results/t/profile/by_label/m.parquet")
    assert len(by_label) == 2
    # the per-environment table is printed at the end of the run
    assert "mean_pass_rate" in r.stdout


def test_dry_run_lists_every_shard_and_contacts_nothing(tmp_path):
    with FakeOpenAI() as server:
        cfg = write_config(tmp_path, endpoint_config(server.base_url, _two_rows(tmp_path)))
        r = snakemake(tmp_path, "-n", "--configfile", str(cfg), "--config", "num_shards=8")
        assert r.returncode == 0, r.stderr[-2000:]
        assert server.stats["requests"] == 0
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", r.stdout, flags=re.M))
    assert counts == {
        "stage_config": "5",  # results/t/config/: materialize, rollout, profile, export, full
        "materialize": "1",
        "shard": "8",
        "rollout": "8",
        "merge": "1",
        "profile": "1",
        "export": "1",
        "report": "1",
        "all": "1",
        "total": "27",
    }
    assert not (tmp_path / "results").exists()


def test_misspelled_key_fails_before_any_job(tmp_path):
    entries = _two_rows(tmp_path)
    entries[0]["num_repeat"] = entries[0].pop("num_repeats")
    cfg = write_config(tmp_path, endpoint_config("http://127.0.0.1:9/v1", entries))
    r = snakemake(tmp_path, "--configfile", str(cfg))
    assert r.returncode != 0
    assert "entries[0].num_repeat: unknown key; did you mean num_repeats?" in r.stderr
    assert not (tmp_path / "results").exists()


def _journal_keys(journal: Path) -> set[tuple[int, int]]:
    scan = scan_journal(journal)
    keys = scan.keys.to_pandas()
    keys = keys[keys["status"] == "ok"]
    return set(zip(keys["task_index"], keys["rollout_index"], strict=True))


def _is_rollout_process(p: psutil.Process) -> bool:
    """The `rewardprof rollout` Python process itself, not the shell that started it."""
    try:
        cmd = p.cmdline()
    except psutil.Error:
        return False
    return "rollout" in cmd and any(c.endswith("rewardprof") for c in cmd)


def _seed_of_requests(server: FakeOpenAI, start: int) -> list[int]:
    return [b["seed"] for b in server.requests[start:]]


def test_resume_after_sigkill_regenerates_nothing_journaled(tmp_path):
    rows = [math_row(f"What is {i} + {i}?", str(2 * i)) for i in range(10)]
    write_jsonl(tmp_path / "data" / "m.jsonl", rows)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 4}]
    # one request per rollout (max_n 1); the server answers 12 of the 40 and holds the rest, so
    # the kill lands mid-shard by construction (the shard cannot finish before it), at a known
    # state: 12 journaled, both workers' requests held
    cfg_dict = endpoint_config(
        "",
        entries,
        num_shards=1,
        rollout={"concurrency": 2, "segment_interval_s": 0.5, "request_timeout_s": 600},
    )
    with FakeOpenAI(scripted({}, default="\\boxed{0}"), latency_s=0.05) as server:
        server.hold_after(12)
        cfg_dict["engine"].update(base_url=server.base_url, max_n=1)
        cfg = write_config(tmp_path, cfg_dict)
        import subprocess
        import sys

        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "snakemake",
                "-s",
                str(Path(__file__).parents[2] / "Snakefile"),
                "-d",
                str(tmp_path),
                "--cores",
                "2",
                "--configfile",
                str(cfg),
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        )
        journal = tmp_path / "results/t/rollouts/journal"
        deadline = time.time() + 300  # liveness only
        victim = None
        while time.time() < deadline:
            victim = next(
                (
                    p
                    for p in psutil.Process(proc.pid).children(recursive=True)
                    if _is_rollout_process(p)
                ),
                None,
            )
            if victim and server.gate_held == 2 and len(_journal_keys(journal)) == 12:
                break
            time.sleep(0.05)
        assert victim is not None, "rollout process never appeared"
        assert server.gate_held == 2, "the rollout never reached the held answers"
        victim.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode != 0, "the killed run must fail"
        journaled = _journal_keys(journal)
        assert len(journaled) == 12
        first_run_requests = len(server.requests)
        assert first_run_requests == 14  # 12 answered + the 2 held
        server.hold_after(None)  # the held two are answered (to a dead process) ...
        deadline = time.time() + 60  # ... before the rerun starts (liveness only)
        while server.stats["ok_choices"] < 14 and time.time() < deadline:
            time.sleep(0.05)

        r = snakemake(tmp_path, *WITHOUT_EXPORT, "--configfile", str(cfg))
        assert r.returncode == 0, r.stderr[-3000:]
        rerun_seeds = _seed_of_requests(server, first_run_requests)

    rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
    keys = set(zip(rollouts["task_index"], rollouts["rollout_index"], strict=True))
    assert len(rollouts) == 40 and len(keys) == 40  # none missing, none duplicated
    assert rollouts["status"].eq("ok").all()
    # the rerun asked exactly for the pairs that were not journaled, each once
    journaled_seeds = set(
        rollouts.set_index(["task_index", "rollout_index"]).loc[sorted(journaled), "seed"]
    )
    assert len(rerun_seeds) == len(set(rerun_seeds)) == 40 - len(journaled)
    assert not set(rerun_seeds) & journaled_seeds
    # total successful generations = T*K plus the requests in flight at the kill (the 2 held)
    in_flight = first_run_requests - len(journaled)
    assert in_flight == 2
    assert server.stats["ok_choices"] == 40 + in_flight


def test_rerun_one_shard_by_target_regenerates_nothing(tmp_path):
    with FakeOpenAI(scripted(ANSWERS)) as server:
        cfg = write_config(tmp_path, endpoint_config(server.base_url, _two_rows(tmp_path)))
        assert snakemake(tmp_path, *WITHOUT_EXPORT, "--configfile", str(cfg)).returncode == 0
        before = server.stats["requests"]
        shard = tmp_path / "results/t/rollouts/0-of-2.parquet"
        old = pq.read_table(shard).to_pandas().sort_values("rollout_index")
        shard.unlink()
        # the target goes first: --configfile takes every value after it
        r = snakemake(tmp_path, "results/t/rollouts/0-of-2.parquet", "--configfile", str(cfg))
        assert r.returncode == 0, r.stderr[-3000:]
        assert server.stats["requests"] == before  # everything came from the journal
    new = pq.read_table(shard).to_pandas().sort_values("rollout_index")
    assert new["completion"].tolist() == old["completion"].tolist()
    assert new["seed"].tolist() == old["seed"].tolist()


def test_configfile_overlay_and_nested_config_override(tmp_path):
    cfg_dict = endpoint_config(
        "http://127.0.0.1:9/v1",
        _two_rows(tmp_path),
        sampling={"temperature": 0.3, "max_tokens": 100},
    )
    cfg = write_config(tmp_path, cfg_dict)
    # the config the rollout stage reads is a file of the run directory: make just that one
    # (the target first: --configfile and --config take every word after them)
    r = snakemake(
        tmp_path,
        "results/other/config/rollout.json",
        "--configfile",
        str(cfg),
        "--config",
        "sampling={max_tokens: 7}",
        "run=other",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    stage = json.loads((tmp_path / "results/other/config/rollout.json").read_text())
    # --config merges into the nested section: max_tokens overridden, temperature kept
    assert stage["sampling"]["max_tokens"] == 7 and stage["sampling"]["temperature"] == 0.3
    assert set(stage) == {"run", "entries", "sampling", "engine", "rollout"}
    assert not (tmp_path / "results/other/rollouts").exists()  # nothing else ran

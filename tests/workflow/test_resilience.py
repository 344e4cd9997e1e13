"""L3 resilience through the real Snakefile: resharding and re-materializing over collected
rollouts (request counts prove nothing was regenerated, records prove nothing was
misattributed), and concurrent controllers / rollout processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from harness import shardkit as kit
from helpers import REPO, WITHOUT_EXPORT, endpoint_config, snakemake, write_config

from rewardprof.manifest.load import validate_config
from rewardprof.store.journal import scan_journal
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow

K = 2


def _cfg(server: FakeOpenAI, workdir: Path, entries: list[dict] | None = None, **over) -> Path:
    entries = entries or [
        {"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}
    ]
    return write_config(workdir, endpoint_config(server.base_url, entries, **over))


def _run(workdir: Path, config: Path, *targets: str):
    r = snakemake(workdir, *targets, *WITHOUT_EXPORT, "--configfile", str(config))
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return r


def _final(workdir: Path, config: Path) -> pd.DataFrame:
    """The merged rollouts, checked record by record against the current tasks table."""
    rollouts = pd.read_parquet(workdir / "results/t/rollouts.parquet")
    tasks = kit.load_tasks(workdir / "results/t/materialize/tasks.parquet")
    import yaml

    cfg = validate_config(yaml.safe_load(config.read_text()))
    assert kit.check_records(rollouts, tasks, cfg) == []
    keys = list(zip(rollouts["task_index"], rollouts["rollout_index"], strict=True))
    assert len(keys) == len(set(keys)) == int(tasks["num_repeats"].sum())
    assert rollouts["status"].eq("ok").all()
    return rollouts


def _asked(server: FakeOpenAI, since: int) -> list[tuple[str, int]]:
    return sorted(kit.request_pairs(server.requests[since:]))


def _pairs(workdir: Path) -> set[tuple[str, int]]:
    rollouts = pd.read_parquet(workdir / "results/t/rollouts.parquet")
    tasks = kit.load_tasks(workdir / "results/t/materialize/tasks.parquet")
    return kit.record_pairs(rollouts, tasks)


def _merge_report(workdir: Path) -> dict:
    return json.loads((workdir / "results/t/merge_report.json").read_text())


# --- reshard ------------------------------------------------------------------------------
def test_reshard_mid_run_regenerates_nothing(tmp_path):
    kit.write_source(tmp_path / "data/m.jsonl", 9)
    with FakeOpenAI(kit.answer) as server:
        two = _cfg(server, tmp_path, num_shards=2)
        _run(tmp_path, two, "results/t/rollouts/0-of-2.parquet")  # half the run, then reshard
        first = kit.request_pairs(server.requests)
        assert len(first) == 5 * K  # tasks 0, 2, 4, 6, 8
        n = len(server.requests)
        three = _cfg(server, tmp_path, num_shards=3)
        _run(tmp_path, three)
        again = _asked(server, n)
        final = _pairs(tmp_path)
        # the new layout asked for exactly the rollouts the old one had not made, once each
        assert again == sorted(final - set(first))
        assert len(again) == 4 * K
        _final(tmp_path, three)
        n = len(server.requests)
        _run(tmp_path, _cfg(server, tmp_path, num_shards=1))  # and back to one shard
        assert len(server.requests) == n
    assert len(list((tmp_path / "results/t/rollouts").glob("*-of-1.parquet"))) == 1


# --- re-materialize ---------------------------------------------------------------------------
def test_change_limit_reuses_and_orphans(tmp_path):
    kit.write_source(tmp_path / "data/m.jsonl", 8)
    entry = {"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": K}
    with FakeOpenAI(kit.answer) as server:
        _run(tmp_path, _cfg(server, tmp_path, [dict(entry, limit=4)]))
        four = _pairs(tmp_path)
        n = len(server.requests)
        six = _cfg(server, tmp_path, [dict(entry, limit=6)])
        _run(tmp_path, six)
        assert len(_asked(server, n)) == 2 * K  # only the two new tasks
        assert _pairs(tmp_path) - four == set(_asked(server, n))
        _final(tmp_path, six)
        n = len(server.requests)
        three = _cfg(server, tmp_path, [dict(entry, limit=3)])
        r = _run(tmp_path, three)
        assert len(server.requests) == n  # fewer tasks: nothing to generate
        _final(tmp_path, three)
    report = _merge_report(tmp_path)
    assert report["orphaned_journal_records"] == 3 * K
    assert report["orphaned_task_ids"] == 3
    assert (
        f"rewardprof: {3 * K} journaled rollouts of 3 tasks that are no longer in the "
        f"tasks table are orphaned: kept in results/t/rollouts/journal, not used"
    ) in r.stderr
    # kept, not deleted
    scan = scan_journal(tmp_path / "results/t/rollouts/journal")
    assert scan.keys.num_rows == 6 * K


def test_insert_entry_before_another_rekeys_by_task_id(tmp_path):
    kit.write_source(tmp_path / "data/b.jsonl", 3, start=0)
    kit.write_source(tmp_path / "data/a.jsonl", 2, start=10)
    b = {"label": "b", "environment": "math", "source": "data/b.jsonl", "num_repeats": K}
    a = {"label": "a", "environment": "math", "source": "data/a.jsonl", "num_repeats": K}
    with FakeOpenAI(kit.answer) as server:
        _run(tmp_path, _cfg(server, tmp_path, [b]))
        before = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
        n = len(server.requests)
        both = _cfg(server, tmp_path, [a, b])
        r = _run(tmp_path, both)
        asked = _asked(server, n)
        assert len(asked) == 2 * K  # only a's tasks
        assert {q for q, _ in asked} == {kit.question(10), kit.question(11)}
        after = _final(tmp_path, both)
    # b's rollouts moved from task_index i to i + 2, same text, same seed
    moved = after[after["label"] == "b"].assign(old=lambda d: d["task_index"] - 2)
    old = before.set_index(["task_index", "rollout_index"])
    for rec in moved.itertuples():
        was = old.loc[(rec.old, rec.rollout_index)]
        assert (was.task_id, was.seed, was.completion) == (rec.task_id, rec.seed, rec.completion)
    assert _merge_report(tmp_path)["rekeyed_journal_records"] == 3 * K
    assert (
        f"rewardprof: {3 * K} journaled rollouts belong to tasks that moved to a new task_index"
    ) in r.stderr


def test_changed_source_row_is_orphaned_not_misattributed(tmp_path):
    src = kit.write_source(tmp_path / "data/m.jsonl", 3)
    with FakeOpenAI(kit.answer) as server:
        config = _cfg(server, tmp_path)
        _run(tmp_path, config)
        old = _pairs(tmp_path)
        rows = [json.loads(x) for x in src.read_text().splitlines()]
        rows[1] = {"question": kit.question(7), "expected_answer": str(3 * 7 + 1)}
        src.write_text("".join(json.dumps(x) + "\n" for x in rows))
        n = len(server.requests)
        r = _run(tmp_path, config)
        asked = _asked(server, n)
        assert len(asked) == K and {q for q, _ in asked} == {kit.question(7)}
        _final(tmp_path, config)  # task 1 is the new row; its rollouts are the new row's
    assert _pairs(tmp_path) - old == set(asked)
    report = _merge_report(tmp_path)
    assert report["orphaned_journal_records"] == K and report["orphaned_task_ids"] == 1
    assert "are orphaned: kept in results/t/rollouts/journal, not used" in r.stderr


# --- concurrent controllers -------------------------------------------------------------------
def _popen_snakemake(workdir: Path, config: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(workdir),
            "--cores",
            "2",
            "--configfile",
            str(config),
        ],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
    )


def _wait_for(predicate, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_second_snakemake_on_same_dir_is_refused(tmp_path):
    kit.write_source(tmp_path / "data/m.jsonl", 4)
    with FakeOpenAI(kit.answer) as server:
        config = _cfg(
            server,
            tmp_path,
            num_shards=1,
            engine={"max_n": 1},
            rollout={"concurrency": 1, "request_timeout_s": 600},
        )
        server.faults.append("hold")  # the first run's first request waits for release()
        first = _popen_snakemake(tmp_path, config)
        _wait_for(lambda: server.stats["fault:hold"] == 1)  # the first is mid-rollout
        second = snakemake(tmp_path, "--configfile", str(config))
        server.release()
        out, _ = first.communicate(timeout=300)
    assert second.returncode != 0
    assert "cannot be locked" in second.stderr + second.stdout
    assert first.returncode == 0, out[-3000:]
    _final(tmp_path, config)


def test_two_rollout_processes_cannot_write_one_shard(tmp_path):
    with FakeOpenAI(kit.answer) as server:
        cfg = kit.make_config(
            server.base_url,
            K,
            engine={"max_n": 1},
            rollout={"concurrency": 1, "request_timeout_s": 300},
        )
        tasks = kit.make_tasks(tmp_path, cfg, 3)
        journal = tmp_path / "journal"

        def rollout(out: str) -> subprocess.Popen:
            return subprocess.Popen(
                kit.rollout_command(cfg, tasks, journal, tmp_path / out),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )

        # the first one's first request waits for release() (its timeout is far longer)
        server.faults.append("hold")
        first = rollout("a.parquet")
        _wait_for(lambda: server.stats["fault:hold"] == 1)  # it holds the shard lock now
        second = rollout("b.parquet")
        out2, _ = second.communicate(timeout=120)
        server.release()
        out1, _ = first.communicate(timeout=120)
    assert second.returncode == 2, out2
    assert (
        f"rewardprof rollout: error: {journal}/.lock-0-of-1: another rollout process is "
        f"running this shard; wait for it or stop it first"
    ) in out2
    assert not (tmp_path / "b.parquet").exists()
    assert first.returncode == 0, out1
    assert server.stats["ok_choices"] == 3 * K  # the refused one asked for nothing
    writers = {w for w in pd.read_parquet(tmp_path / "a.parquet")["writer"]}
    assert len(writers) == 1

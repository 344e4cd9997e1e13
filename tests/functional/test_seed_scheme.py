"""Rollout seeds. Distinct 51-bit seed bases per task (the 15-bit bases of
seed scheme 1 were shared by most tasks at scale), and journals of seed scheme 1 are stale:
their rollouts are generated again, never mixed with new ones, and the log says why."""

from __future__ import annotations

import hashlib
import random

import pyarrow.parquet as pq
import pytest
from harness import shardkit as kit

from rewardprof.core.config import ConfigError
from rewardprof.manifest.load import validate_config
from rewardprof.stages.rollout import request_bodies, runner
from rewardprof.stages.rollout.shard_job import ShardJob, run_shard
from rewardprof.store import seeds
from rewardprof.store.journal import scan_journal
from rewardprof.store.seeds import gen_key, task_seed
from rewardprof.testing.fake_server import FakeOpenAI


def _scheme1_task_seed(base_seed: int, task_id: str) -> int:
    """task_seed of seed scheme 1 (2^15 bases), to write a journal as earlier code did."""
    digest = hashlib.sha256(f"{base_seed}:{task_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF0000


def _old_gen_key(cfg, model: str) -> str:
    """The gen_key of the code that wrote the old journal (another seed scheme)."""
    return "scheme-1:" + gen_key(cfg, model)


def test_a_million_random_task_ids_get_distinct_seed_bases():
    """Scheme 1 fails this at once (2^15 bases for 10^6 tasks); scheme 2's expected number of
    colliding pairs at 10^6 tasks is 2.2e-4 (docs/robustness.md)."""
    rng = random.Random(14)
    ids = [f"{rng.getrandbits(128):032x}" for _ in range(10**6)]
    bases = [task_seed(0, t) for t in ids]
    assert len(set(bases)) == len(ids)
    assert all(b & 0xFFF == 0 for b in bases[:1000])  # the low 12 bits are the rollout's
    assert max(bases) + 4095 <= 2**63 - 1  # a signed 64-bit seed (vLLM's range)
    assert max(bases) >= 2**62  # the top bit of the 63 is used


def test_seed_depends_on_base_seed_and_task():
    assert task_seed(0, "a") != task_seed(1, "a") != task_seed(1, "b")
    assert task_seed(-5, "a") >= 0  # any config seed gives a non-negative 63-bit seed


def test_num_repeats_is_bounded_by_the_rollout_bits():
    entry = {"label": "m", "environment": "math", "source": "m.jsonl"}
    assert validate_config({"entries": [dict(entry, num_repeats=4096)]})
    with pytest.raises(
        ConfigError,
        match=r"entries\[0\]\.num_repeats: at most 4096 rollouts "
        r"per task .*low 12 bits",
    ):
        validate_config({"entries": [dict(entry, num_repeats=4097)]})


def test_gen_key_names_the_seed_scheme(monkeypatch):
    cfg = kit.make_config("http://x")
    key = gen_key(cfg, kit.MODEL)
    monkeypatch.setattr(seeds, "SEED_SCHEME", seeds.SEED_SCHEME + 1)
    assert gen_key(cfg, kit.MODEL) != key  # records of another scheme are never reused


def test_a_journal_of_other_seeds_is_regenerated_not_mixed(tmp_path, monkeypatch):
    """A journal written by other code (other seeds, so another gen_key) is not reused: every
    rollout is generated again with the seeds of today, and the output holds only new
    records."""
    with FakeOpenAI(kit.answer) as server:
        cfg = kit.make_config(server.base_url, num_repeats=3)
        tasks = kit.make_tasks(tmp_path, cfg, 4)
        journal = tmp_path / "journal"
        with monkeypatch.context() as m:  # the code of seed scheme 1
            m.setattr(request_bodies, "task_seed", _scheme1_task_seed)
            m.setattr(runner, "gen_key", _old_gen_key)
            run_shard(
                ShardJob(cfg, tasks, journal, tmp_path / "old.parquet", "0-of-1"), kit.engine(cfg)
            )
        old = pq.read_table(tmp_path / "old.parquet").to_pandas()
        assert (old["seed"] < 2**31).all()
        before = len(server.requests)
        summary = run_shard(
            ShardJob(cfg, tasks, journal, tmp_path / "new.parquet", "0-of-1"), kit.engine(cfg)
        )
        assert len(server.requests) > before  # generated again
    assert summary["generated"] == 12 and summary["stale"] == 12
    new = pq.read_table(tmp_path / "new.parquet").to_pandas()
    assert set(new["gen_key"]) == {gen_key(cfg, kit.MODEL)}
    assert kit.check_records(new, kit.load_tasks(tasks), cfg) == []  # scheme-2 seeds
    assert not set(new["seed"]) & set(old["seed"])
    # the old records stay in the journal, next to the new ones, under their own key
    keys = scan_journal(journal).keys.column("gen_key").to_pylist()
    assert sorted(set(keys)) == sorted({gen_key(cfg, kit.MODEL), _old_gen_key(cfg, kit.MODEL)})


def test_check_reports_shard_outputs_of_two_gen_keys(tmp_path):
    """`rewardprof check`: a shard output of the old scheme next to new ones is a problem."""
    import pyarrow as pa

    from rewardprof.tools.check import _check_gen_keys, _gen_keys

    paths = []
    for i, keys in enumerate([["new", "new"], ["old"], ["new"]]):
        paths.append(tmp_path / f"{i}-of-3.parquet")
        pq.write_table(pa.table({"gen_key": keys}), paths[-1])
    problems: list[str] = []
    _check_gen_keys({str(p): _gen_keys(p) for p in paths}, problems)
    assert problems == [
        "rollouts carry 2 different gen_keys (model, sampling or seed scheme): "
        "new in 0-of-3.parquet, 2-of-3.parquet; old in 1-of-3.parquet; rerun "
        "the shards of the old setup"
    ]
    problems = []
    _check_gen_keys({str(p): _gen_keys(p) for p in paths[::2]}, problems)
    assert problems == []

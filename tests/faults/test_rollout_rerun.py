"""What a rerun of a rollout job does. With every rollout journaled it starts no engine: it
reads the journal first and writes its output from it, proven with engines that cannot start
(serve mode with an interpreter that does not exist, an endpoint nobody listens on). With
failures under rollout.max_failed_fraction the output is written and the log says what to type
to retry them; the retry (the job run again) asks for the failed pairs only."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from harness import shardkit as kit

from rewardprof.engine.host import free_port
from rewardprof.manifest.load import validate_config
from rewardprof.stages import RolloutPaths, rollout
from rewardprof.stages.rollout.shard_job import EngineOpener, ShardJob, run_shard
from rewardprof.store.shards import ShardPosition
from rewardprof.testing.fake_server import FakeOpenAI


def _fill_journal(tmp_path):
    """A complete journal for one shard of 3 tasks x 2 rollouts, made against the fake server."""
    with FakeOpenAI(kit.answer) as server:
        cfg = kit.make_config(server.base_url, num_repeats=2)
        tasks = kit.make_tasks(tmp_path, cfg, 3)
        first = run_shard(
            ShardJob(cfg, tasks, tmp_path / "journal", tmp_path / "a.parquet", "0-of-1"),
            kit.engine(cfg),
        )
    assert first["generated"] == 6
    return cfg, tasks


def _paths(tmp_path, tasks, out_name):
    return RolloutPaths(
        tasks=tasks,
        journal=tmp_path / "journal",
        out=tmp_path / out_name,
        shard=ShardPosition(0, 1),
        engine_log=tmp_path / "engine.log",
    )


def test_serve_mode_with_everything_journaled_starts_no_engine(tmp_path):
    cfg, tasks = _fill_journal(tmp_path)
    data = cfg.model_dump(mode="json")
    data["engine"] = {
        "mode": "serve",
        "model": kit.MODEL,
        "python": str(tmp_path / "no-such-interpreter"),  # starting vLLM would fail at once
    }
    serve_cfg = validate_config(data, origin="test")
    summary = rollout.run(serve_cfg, _paths(tmp_path, tasks, "b.parquet"))
    assert summary["generated"] == 0
    assert summary["ok"] + summary["failed"] == 6
    assert not (tmp_path / "engine.log").exists()  # no server was launched
    assert pq.read_table(tmp_path / "b.parquet").num_rows == 6


def test_endpoint_mode_with_everything_journaled_needs_no_endpoint(tmp_path):
    cfg, tasks = _fill_journal(tmp_path)
    data = cfg.model_dump(mode="json")
    data["engine"]["base_url"] = f"http://127.0.0.1:{free_port('127.0.0.1')}/v1"  # nobody there
    summary = rollout.run(
        validate_config(data, origin="test"), _paths(tmp_path, tasks, "c.parquet")
    )
    assert summary["generated"] == 0
    assert pq.read_table(tmp_path / "c.parquet").num_rows == 6


def test_a_missing_rollout_opens_the_engine(tmp_path):
    """The other side: one missing rollout and the dead endpoint is contacted (and refused)."""
    cfg, tasks = _fill_journal(tmp_path)
    data = cfg.model_dump(mode="json")
    data["entries"][0]["num_repeats"] = 3  # one more rollout per task
    data["engine"]["base_url"] = f"http://127.0.0.1:{free_port('127.0.0.1')}/v1"
    more = validate_config(data, origin="test")
    tasks = kit.make_tasks(tmp_path / "more", more, 3)
    opened: list[bool] = []

    def opener():
        opened.append(True)
        raise ConnectionRefusedError("the endpoint is down")

    with pytest.raises(ConnectionRefusedError, match="down"):
        engine = EngineOpener(more.model_name, opener)
        run_shard(
            ShardJob(more, tasks, tmp_path / "journal", tmp_path / "d.parquet", "0-of-1"), engine
        )
    assert opened == [True]
    assert not (tmp_path / "d.parquet").exists()


def test_failures_under_the_limit_say_how_to_retry_and_a_rerun_retries_them(tmp_path, caplog):
    with FakeOpenAI(kit.answer) as server:
        cfg = kit.make_config(
            server.base_url,
            num_repeats=2,
            rollout={"max_attempts": 1, "max_failed_fraction": 0.5},
            engine={"max_n": 1},
        )
        tasks = kit.make_tasks(tmp_path, cfg, 3)
        server.faults.extend(["500", "500"])  # the first two requests fail for good
        out = tmp_path / "out.parquet"
        with caplog.at_level("WARNING", logger="rewardprof.stages.rollout"):
            first = run_shard(
                ShardJob(cfg, tasks, tmp_path / "journal", out, "0-of-1"), kit.engine(cfg)
            )
        assert first["failed"] == 2 and first["ok"] == 4
        line = next(r.getMessage() for r in caplog.records if "failed terminally" in r.getMessage())
        assert "within rollout.max_failed_fraction=0.5" in line
        assert "add --forcerun rollout" in line and str(out) in line
        asked = len(server.requests)
        again = run_shard(
            ShardJob(cfg, tasks, tmp_path / "journal", out, "0-of-1"), kit.engine(cfg)
        )
    assert again["generated"] == 2  # the two failed pairs, nothing journaled ok
    assert len(server.requests) == asked + 2
    assert again["ok"] == 6 and again["failed"] == 0

"""L2 fault suite: the rollout stage (run_shard, in process) against the fault-injecting fake
server. Each fault is asserted on the records written: status, attempt, reward, error, seed.

Backoffs are tiny (10-20 ms) so only Retry-After can explain a long wait. Waits are asserted on
what the client chose to wait (`backoffs`) or as lower bounds on server-side gaps (a slow or
loaded machine only lengthens those): no upper bound on wall-clock time decides a test.
"""

from __future__ import annotations

import json
import threading

import pandas as pd
import pyarrow.parquet as pq
import pytest
from harness import shardkit as kit

from rewardprof.engine.http_retry import RetryPolicy
from rewardprof.stages import MergePaths, ProfilePaths, merge, profile
from rewardprof.stages.rollout.output import ShardIncomplete
from rewardprof.stages.rollout.shard_job import ShardJob, run_shard
from rewardprof.store.journal import read_rows, scan_journal
from rewardprof.store.layout import ProfileFiles
from rewardprof.store.seeds import task_seed
from rewardprof.testing.fake_server import FakeOpenAI


@pytest.fixture
def server():
    with FakeOpenAI(kit.answer) as s:
        yield s


@pytest.fixture
def backoffs(monkeypatch) -> list[float]:
    """Every delay the chat client chose before a retry (backoff or Retry-After), in order."""
    chosen: list[float] = []
    real = RetryPolicy.delay_s

    def recording(self, attempt, retry_after, rng):
        chosen.append(real(self, attempt, retry_after, rng))
        return chosen[-1]

    monkeypatch.setattr(RetryPolicy, "delay_s", recording)
    return chosen


def _run(tmp_path, server, num_tasks=1, num_repeats=2, rollout=None, engine=None, api_key=None):
    cfg = kit.make_config(server.base_url, num_repeats, rollout=rollout, engine=engine)
    tasks = kit.make_tasks(tmp_path, cfg, num_tasks)
    out = tmp_path / "out.parquet"
    summary = run_shard(
        ShardJob(cfg, tasks, tmp_path / "journal", out, "0-of-1"), kit.engine(cfg, api_key)
    )
    records = pq.read_table(out).to_pandas().sort_values(["task_index", "rollout_index"])
    assert kit.check_records(records, kit.load_tasks(tasks), cfg) == []
    return summary, records.reset_index(drop=True), cfg, tasks


def _journal(tmp_path) -> pd.DataFrame:
    scan = scan_journal(tmp_path / "journal")
    picks: dict[int, list[int]] = {}
    for src, row in zip(scan.keys["_src"].to_pylist(), scan.keys["_row"].to_pylist(), strict=True):
        picks.setdefault(src, []).append(row)
    parts = [t.to_pandas() for t in read_rows(scan, picks)]
    return pd.concat(parts, ignore_index=True).sort_values(["task_index", "rollout_index"])


# --- transient faults: retried, then ok -------------------------------------------------------
@pytest.mark.parametrize(
    "faults",
    [
        ["500"],
        ["502"],
        ["503"],
        ["503", "503"],
        ["429"],
        ["reset"],
        ["garbage"],
        ["500", "reset", "garbage"],
    ],
)
def test_transient_fault_is_retried_then_ok(tmp_path, server, faults):
    server.faults.extend(faults)
    summary, rec, _, _ = _run(tmp_path, server)
    assert server.stats["requests"] == len(faults) + 1
    assert rec["status"].tolist() == ["ok", "ok"]
    assert rec["attempt"].tolist() == [len(faults) + 1] * 2
    assert rec["error"].isna().all() and rec["reward"].notna().all()
    assert summary["by_status"] == {"ok": 2} and summary["failed"] == 0
    # every retry asked for the same samples with the same seed
    assert len({(b["n"], b["seed"]) for b in server.requests}) == 1


@pytest.mark.parametrize(
    "header, at_least, at_most", [("retry_after=1", 1.0, 1.0), ("retry_after_date=3", 1.8, 3.0)]
)
def test_429_honours_retry_after(tmp_path, server, backoffs, header, at_least, at_most):
    server.faults.append(f"429:{header}")
    _, rec, _, _ = _run(tmp_path, server)
    gap = server.request_times[1] - server.request_times[0]
    # backoff is <= 30 ms here: only the header explains the wait (a lower bound: a loaded
    # machine only adds to it; the date has 1 s resolution: 2-3 s after the 429 was sent)
    assert gap >= at_least
    # ... and the client waited what the header said, not more (its choice, not the clock)
    assert len(backoffs) == 1 and backoffs[0] <= at_most
    if at_least == at_most:
        assert backoffs[0] == at_least
    assert rec["status"].tolist() == ["ok", "ok"] and rec["attempt"].tolist() == [2, 2]


def test_429_without_retry_after_backs_off_briefly(tmp_path, server, backoffs):
    server.faults.extend(["429", "429"])
    _, rec, _, _ = _run(tmp_path, server)
    # backoff only: 10-20 ms (x0.5-1.5 jitter), whatever the machine's speed
    assert len(backoffs) == 2 and all(0 < b <= 0.03 for b in backoffs), backoffs
    assert rec["attempt"].tolist() == [3, 3]


def test_hang_past_timeout_is_retried(tmp_path, server):
    # "hold": the first request is never answered while the shard runs, so only the client's
    # timeout can have moved it on (the timer below only keeps a broken timeout from hanging
    # the suite: then the late answer would be ok_requests 2 and attempt 1)
    server.faults.append("hold")
    liveness = threading.Timer(120, server.release)
    liveness.start()
    try:
        _, rec, _, _ = _run(tmp_path, server, rollout={"request_timeout_s": 1})
        assert server.stats["fault:hold"] == 1 and server.stats["ok_requests"] == 1
    finally:
        liveness.cancel()
    assert rec["status"].tolist() == ["ok", "ok"] and rec["attempt"].tolist() == [2, 2]


# --- transient faults that never stop: a typed failure after the last attempt -----------------
@pytest.mark.parametrize(
    "fault, status, error",
    [
        ("503", "engine_error", "HTTP 503: "),
        ("429", "rate_limited", "HTTP 429: "),
        ("hang", "timeout", "no response within 1s"),  # until the server stops: never answered
        ("reset", "connection_error", "ClientPayloadError"),
        ("garbage", "engine_error", "invalid reply: malformed JSON in body"),
    ],
)
def test_persistent_fault_ends_in_typed_failure(tmp_path, server, fault, status, error):
    server.fault_fn = lambda body: fault
    # a short timeout only where it is the point: an answered fault must not turn into a
    # timeout on a loaded machine
    summary, rec, cfg, tasks = _run(
        tmp_path,
        server,
        rollout={
            "max_attempts": 3,
            "max_failed_fraction": 1.0,
            "request_timeout_s": 1 if fault == "hang" else 120,
        },
    )
    assert server.stats["requests"] == 3 and server.stats["ok_requests"] == 0
    assert rec["status"].tolist() == [status, status]
    assert rec["attempt"].tolist() == [3, 3]
    assert rec["reward"].isna().all()  # a failure is never a reward of 0
    assert rec["completion"].isna().all()
    assert all(error in e for e in rec["error"])
    seed0 = task_seed(0, rec["task_id"][0])
    assert rec["seed"].tolist() == [seed0, seed0 + 1]
    assert summary["by_status"] == {status: 2} and summary["ok"] == 0


def test_retry_budget_bounds_total_time(tmp_path, server, backoffs):
    server.fault_fn = lambda body: "503"
    _, rec, _, _ = _run(
        tmp_path,
        server,
        rollout={
            "max_attempts": 1000,
            "retry_budget_s": 0.5,
            "backoff_initial_s": 0.05,
            "backoff_max_s": 0.1,
            "max_failed_fraction": 1.0,
        },
    )
    requests = server.stats["requests"]
    # the budget ended it, not max_attempts: it slept at most 0.5 s in all, each backoff >= 25
    # ms (the first) or 50 ms, so at most 11 requests however fast the server answers
    assert rec["attempt"].tolist() == [requests] * 2 and 1 <= requests <= 11
    assert len(backoffs) == requests  # one per failed attempt, the last one not slept
    assert sum(backoffs[: requests - 1]) <= 0.5
    # ... and it retried until the budget was nearly spent (a lower bound: safe when slow);
    # the give-up happens when the next backoff (<= 0.15 s) would pass 0.5 s
    assert (rec["finished_at"] - rec["started_at"]).min() >= 0.5 - 0.15
    assert rec["status"].tolist() == ["engine_error"] * 2


@pytest.mark.parametrize("fault, status", [("429", "rate_limited"), ("503", "engine_error")])
def test_a_retry_after_without_end_is_capped_then_the_request_fails_with_its_kind(
    tmp_path, server, backoffs, fault, status
):
    # `Retry-After: 999999999` (31 years) is waited rollout.retry_after_max_s, not forever
    server.fault_fn = lambda body: f"{fault}:retry_after=999999999"
    rollout = {"max_attempts": 3, "retry_after_max_s": 0.2, "max_failed_fraction": 1.0}
    _, rec, _, _ = _run(tmp_path, server, rollout=rollout)
    assert backoffs == [0.2, 0.2, 0.2]  # after each attempt; the last one is not slept
    assert rec["status"].tolist() == [status] * 2 and rec["attempt"].tolist() == [3, 3]
    assert all(f"HTTP {fault}" in e for e in rec["error"]) and rec["reward"].isna().all()
    assert (rec["finished_at"] - rec["started_at"]).max() < 30  # seconds, not years


# --- deterministic errors: no retry ----------------------------------------------------------
def test_context_length_fails_at_once_without_retry(tmp_path, server, backoffs):
    server.fault_fn = lambda body: "context_length"
    summary, rec, _, _ = _run(
        tmp_path,
        server,
        rollout={"max_failed_fraction": 1.0, "backoff_initial_s": 5, "backoff_max_s": 5},
    )
    # at once: no backoff was even computed (it would have been >= 2.5 s)
    assert backoffs == []
    assert server.stats["requests"] == 1
    assert rec["status"].tolist() == ["context_length"] * 2
    assert rec["attempt"].tolist() == [1, 1]
    assert rec["reward"].isna().all()
    assert all("maximum context length" in e for e in rec["error"])
    assert summary["by_status"] == {"context_length": 2}


# --- partial answers -------------------------------------------------------------------------
def test_fewer_choices_reasks_only_the_missing_with_their_seeds(tmp_path, server):
    server.faults.extend(["fewer", "fewer"])
    _, rec, _, _ = _run(tmp_path, server, num_repeats=4)
    seed0 = task_seed(0, rec["task_id"][0])
    # 4 asked, 3 came; then 1 asked (seed0+3), 0 came; then 1 asked again, 1 came
    assert [(b["n"], b["seed"]) for b in server.requests] == [
        (4, seed0),
        (1, seed0 + 3),
        (1, seed0 + 3),
    ]
    assert rec["status"].tolist() == ["ok"] * 4
    assert rec["seed"].tolist() == [seed0 + r for r in range(4)]
    assert server.stats["ok_choices"] == 4


def test_fewer_choices_forever_fails_only_the_missing(tmp_path, server):
    server.fault_fn = lambda body: "fewer"
    _, rec, _, _ = _run(
        tmp_path, server, num_repeats=3, rollout={"max_attempts": 2, "max_failed_fraction": 1.0}
    )
    # attempt 1 gives 2 of 3; attempt 2 asks for 1 and gets 0
    assert rec["status"].tolist() == ["ok", "ok", "engine_error"]
    assert rec["reward"][:2].notna().all() and pd.isna(rec["reward"][2])
    assert "server returned 0 of 1 choices" in rec["error"][2]


def test_finish_reason_length_recorded_and_still_scored(tmp_path, server):
    server.faults.append("length")
    summary, rec, cfg, tasks = _run(tmp_path, server)
    assert rec["finish_reason"].tolist() == ["length", "length"]
    assert rec["status"].tolist() == ["ok", "ok"]
    # scored like any answer: the fake answer is right unless seed % 3 == 0
    assert rec["reward"].tolist() == [kit.expected_reward(s) for s in rec["seed"]]
    prof = _profile(tmp_path, cfg, tasks)
    assert prof.loc[0, "num_truncated"] == 2 and prof.loc[0, "num_rollouts"] == 2


def _profile(tmp_path, cfg, tasks) -> pd.DataFrame:
    rollouts = tmp_path / "rollouts.parquet"
    merge.run(
        None,
        MergePaths(
            shards=(tmp_path / "out.parquet",),
            tasks=tasks,
            journal=tmp_path / "journal",
            out=rollouts,
            report=tmp_path / "merge.json",
        ),
    )
    profile.run(
        cfg,
        ProfilePaths(
            tasks=tasks,
            rollouts=rollouts,
            report=tmp_path / "report.json",
            out=ProfileFiles(tmp_path / "profile"),
        ),
    )
    return pd.read_parquet(tmp_path / "profile/tasks.parquet").set_index("task_index")


# --- terminal failures: the shard summary and max_failed_fraction ----------------------------
def _one_task_fails(body: dict) -> str | None:
    return "context_length" if "What is 1 + 3?" in json.dumps(body) else None


def test_terminal_failures_over_limit_leave_no_output(tmp_path, server):
    server.fault_fn = _one_task_fails
    cfg = kit.make_config(server.base_url, 2, rollout={"max_failed_fraction": 0.25})
    tasks = kit.make_tasks(tmp_path, cfg, 3)
    out = tmp_path / "out.parquet"
    with pytest.raises(ShardIncomplete) as exc:
        run_shard(ShardJob(cfg, tasks, tmp_path / "journal", out, "0-of-1"), kit.engine(cfg))
    assert str(exc.value) == (
        "0-of-1: 2 of 6 rollouts failed terminally (context_length=2), over "
        "rollout.max_failed_fraction=0.25; rerun the shard to retry them"
    )
    assert not out.exists()
    assert [p.name for p in out.parent.iterdir() if p.name.startswith(".out")] == []
    # every rollout, failed or not, is journaled
    journal = _journal(tmp_path)
    assert sorted(journal["status"].tolist()) == ["context_length"] * 2 + ["ok"] * 4
    assert journal.loc[journal["status"] != "ok", "reward"].isna().all()


def test_terminal_failures_within_limit_complete_and_show_per_task(tmp_path, server):
    server.fault_fn = _one_task_fails
    summary, rec, cfg, tasks = _run(
        tmp_path, server, num_tasks=3, rollout={"max_failed_fraction": 0.4}
    )
    assert summary["expected"] == summary["present"] == 6
    assert summary["ok"] == 4 and summary["failed"] == 2
    assert summary["by_status"] == {"context_length": 2, "ok": 4}
    prof = _profile(tmp_path, cfg, tasks)
    assert prof["num_failed"].tolist() == [0, 2, 0]
    assert prof["num_failed/context_length"].tolist() == [0, 2, 0]
    assert prof["num_rollouts"].tolist() == [2, 0, 2]
    assert prof["missing_num_rollouts"].tolist() == [0, 0, 0]
    assert pd.isna(prof.loc[1, "mean/reward"]) and pd.isna(prof.loc[1, "pass_rate"])
    summary_json = json.loads((tmp_path / "profile/summary.json").read_text())
    assert summary_json["overall"]["failed"] == 2


def test_rerun_retries_only_failed_rollouts(tmp_path, server):
    server.fault_fn = _one_task_fails
    _run(tmp_path, server, num_tasks=3, rollout={"max_failed_fraction": 1.0})
    first = len(server.requests)
    server.fault_fn = None
    summary, rec, _, _ = _run(tmp_path, server, num_tasks=3)
    again = server.requests[first:]
    assert len(again) == 1 and "What is 1 + 3?" in json.dumps(again[0])
    assert summary["generated"] == 2 and summary["journaled_ok"] == 4
    assert rec["status"].tolist() == ["ok"] * 6


def test_api_key_sent_and_never_recorded(tmp_path):
    sentinel = "sk-SENTINEL-fault-suite-0123456789"
    with FakeOpenAI(kit.answer, api_key=sentinel) as server:
        _, rec, _, _ = _run(tmp_path, server, api_key=sentinel)
        assert server.stats["auth_ok"] == 1 and server.stats["auth_failed"] == 0
    assert rec["status"].tolist() == ["ok", "ok"]


def test_rejected_key_is_request_error_and_redacted(tmp_path):
    sentinel = "sk-SENTINEL-wrong-key-0123456789"
    with FakeOpenAI(kit.answer, api_key="sk-the-right-one", echo_key=True) as server:
        cfg = kit.make_config(server.base_url, 2, rollout={"max_failed_fraction": 1.0})
        tasks = kit.make_tasks(tmp_path, cfg, 1)
        run_shard(
            ShardJob(cfg, tasks, tmp_path / "journal", tmp_path / "out.parquet", "0-of-1"),
            kit.engine(cfg, api_key=sentinel),
        )
        assert server.stats["requests"] == 1  # 401 is not retried
    rec = pq.read_table(tmp_path / "out.parquet").to_pandas()
    assert rec["status"].tolist() == ["request_error"] * 2
    assert all(e.startswith("HTTP 401: ") for e in rec["error"])
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert sentinel.encode() not in path.read_bytes(), path


def test_api_key_and_url_password_together_send_the_key(tmp_path):
    """A base URL with user:password and an API key: the key is sent (aiohttp refuses both in
    one request, which used to fail every request with a ValueError)."""
    key = "sk-SENTINEL-both-0123456789"
    with FakeOpenAI(kit.answer, api_key=key) as server:
        url = server.base_url.replace("http://", "http://user:pw-SENTINEL-both@")
        cfg = kit.make_config(url, 2)
        tasks = kit.make_tasks(tmp_path, cfg, 1)
        out = tmp_path / "out.parquet"
        run_shard(ShardJob(cfg, tasks, tmp_path / "journal", out, "0-of-1"), kit.engine(cfg, key))
        assert server.stats["auth_ok"] == 1 and server.stats["auth_failed"] == 0
    assert pq.read_table(out).to_pandas()["status"].tolist() == ["ok", "ok"]

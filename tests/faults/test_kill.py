"""Kill safety: SIGKILL the rollout stage at random moments and at the worst ones (mid journal
line, mid segment, mid output), rerun, and check every trial (see tests/harness/kill_harness.py
for the checks). ~200 more trials: `python benchmarks/kill_harness.py` (docs/benchmarks.md).

Every kill lands by construction, on an idle or a loaded machine: a random kill waits for the
fake server to hold an answer the attempt needs, and a self-kill point is numbered within what
the attempt certainly reaches. No assertion here depends on timing luck."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
from harness import shardkit as kit
from harness.kill_harness import KILL_POINTS, check_output, run_trial

from rewardprof.testing.fake_server import FakeOpenAI

TRIALS_PER_POINT = 3  # 7 kill points -> 21 trials, 1-2 kills each
MID_GENERATION = ("random", "torn_line")  # kills that always leave rollouts to generate


def test_kill_trials_fork(tmp_path):
    trials = [
        run_trial(tmp_path, seed, KILL_POINTS[seed % len(KILL_POINTS)])
        for seed in range(TRIALS_PER_POINT * len(KILL_POINTS))
    ]
    failed = {t.seed: (t.point, t.problems) for t in trials if t.problems}
    assert failed == {}
    # every trial killed at least one attempt and every kill landed (a kill that never lands
    # proves nothing; run_trial also reports one as a problem): each point hit 3+ times
    assert all(t.killed and all(t.killed) for t in trials)
    # a random kill holds back an answer the attempt needs, a torn line loses its rollout: the
    # clean attempt had rollouts left to generate
    assert all(t.generated_clean > 0 for t in trials if t.point in MID_GENERATION)
    # a segment or output kill comes after records were appended: the clean attempt reused them
    assert all(t.journaled_ok[-1] > 0 for t in trials if t.point not in MID_GENERATION)
    # an output kill comes after every rollout was journaled: nothing is generated again
    assert all(
        t.generated_clean == 0
        and t.journaled_ok[-1] == t.params["num_tasks"] * t.params["num_repeats"]
        for t in trials
        if t.point.startswith("output_")
    )


def test_kill_trials_cli(tmp_path):
    """The real `rewardprof rollout` command, SIGKILLed at random moments."""
    trials = [run_trial(tmp_path, 1000 + seed, "random", mode="cli") for seed in range(2)]
    assert {t.seed: t.problems for t in trials if t.problems} == {}
    assert all(t.killed and all(t.killed) and t.generated_clean > 0 for t in trials)


def test_gate_holds_answers_and_survives_a_killed_client(tmp_path):
    """The fake server's gate (what random kills rely on): it answers m requests, holds the
    next, and re-arming it after the held request's client was SIGKILLed serves on."""
    body = json.dumps({"model": kit.MODEL, "messages": [{"role": "user", "content": "hi"}]})
    post = (
        "import sys, urllib.request; urllib.request.urlopen(urllib.request.Request("
        "sys.argv[1], data=sys.argv[2].encode(), headers={'Content-Type': "
        "'application/json'}), timeout=300)"
    )
    with FakeOpenAI(model=kit.MODEL) as server:
        url = server.base_url + "/chat/completions"

        def client() -> subprocess.Popen:
            return subprocess.Popen([sys.executable, "-c", post, url, body])

        server.hold_after(1)
        assert client().wait(60) == 0  # the first answer is served
        held = client()
        deadline = time.monotonic() + 60  # liveness only
        while server.gate_held < 1 and held.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.gate_held == 1 and held.poll() is None  # ... the second one is held
        held.send_signal(signal.SIGKILL)
        assert held.wait(60) == -signal.SIGKILL
        server.hold_after(0)  # lets the dead client's request go: an answer to a closed socket
        server.hold_after(None)
        assert client().wait(60) == 0
        assert server.stats["ok_requests"] == 3 and server.gate_held == 0


def test_gate_with_match_holds_only_the_picked_requests():
    """`hold_after(m, match=...)`: only requests `match` picks count toward m and are held (one
    shard's, in tests/slurm); the others are served while a picked one waits at the gate."""
    import threading
    import urllib.request

    with FakeOpenAI(model=kit.MODEL) as server:

        def post(content: str) -> int:
            body = {"model": kit.MODEL, "messages": [{"role": "user", "content": content}]}
            req = urllib.request.Request(
                server.base_url + "/chat/completions",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=300) as resp:
                return resp.status

        with urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/health") as r:
            assert r.read() == b"ok"
        server.hold_after(1, match=lambda body: body["messages"][0]["content"] == "picked")
        assert post("picked") == 200  # the one answer the gate lets through
        assert [post("other") for _ in range(3)] == [200] * 3  # not counted, not held
        assert server.gate_served == 1 and server.gate_held == 0
        held = threading.Thread(target=post, args=("picked",), daemon=True)
        held.start()
        deadline = time.monotonic() + 60  # liveness only
        while server.gate_held < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.gate_held == 1 and held.is_alive()
        assert post("other") == 200  # served while the picked request waits
        assert server.gate_held == 1 and held.is_alive()
        server.hold_after(None)
        held.join(60)
        assert not held.is_alive() and server.gate_held == 0
        assert server.stats["ok_requests"] == 6


def test_harness_detects_misattribution(tmp_path):
    """The checker itself: a shard output with two tasks' rewards swapped must fail it."""
    trial = run_trial(tmp_path, 7, "output_post_rename")
    assert trial.problems == []
    work = tmp_path / "trial-7"
    cfg = kit.make_config(
        "http://127.0.0.1:9/v1",
        trial.params["num_repeats"],
        engine={"max_n": trial.params["max_n"]},
    )
    tasks = kit.load_tasks(work / "tasks.parquet")
    table = pq.read_table(work / "out.parquet").to_pandas()
    a, b = table.index[table["task_index"] == 0][0], table.index[table["task_index"] == 1][0]
    table.loc[[a, b], "completion"] = table.loc[[b, a], "completion"].to_numpy()
    table.to_parquet(work / "out.parquet")
    problems = check_output({"out": str(work / "out.parquet")}, tasks, cfg)
    assert any("is not its task's" in p for p in problems), problems
    table = table.drop(index=a)
    table.to_parquet(work / "out.parquet")
    problems = check_output({"out": str(work / "out.parquet")}, tasks, cfg)
    assert any("1 missing" in p for p in problems), problems

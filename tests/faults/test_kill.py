"""Kill safety: SIGKILL the rollout stage at random moments and at the worst ones (mid journal
line, mid segment, mid output), rerun, and check every trial (see rewardprof.testing.kill_harness
for the checks). ~200 more trials: `python benchmarks/kill_harness.py` (docs/benchmarks.md)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from rewardprof.testing import shardkit as kit
from rewardprof.testing.fake_server import FakeOpenAI
from rewardprof.testing.kill_harness import KILL_POINTS, _check_output, run_trial

TRIALS_PER_POINT = 3  # 7 kill points -> 21 trials, 1-2 kills each


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI(kit.answer) as s:
        yield s


def test_kill_trials_fork(server, tmp_path):
    trials = [run_trial(server, tmp_path, seed, KILL_POINTS[seed % len(KILL_POINTS)])
              for seed in range(TRIALS_PER_POINT * len(KILL_POINTS))]
    failed = {t.seed: (t.point, t.problems) for t in trials if t.problems}
    assert failed == {}
    landed = {p: sum(sum(t.killed) for t in trials if t.point == p) for p in KILL_POINTS}
    # every kill point was actually hit (a kill that never lands proves nothing)
    assert all(n >= 1 for n in landed.values()), landed
    assert sum(landed.values()) >= 20
    # kills landed mid-run: some trials had rollouts to reuse and some still to generate
    assert sum(t.journaled_ok[-1] > 0 for t in trials) >= 10
    assert sum(t.generated_clean > 0 for t in trials) >= 5


def test_kill_trials_cli(server, tmp_path):
    """The real `rewardprof rollout` command, SIGKILLed at random moments."""
    trials = [run_trial(server, tmp_path, 1000 + seed, "random", mode="cli") for seed in range(2)]
    assert {t.seed: t.problems for t in trials if t.problems} == {}


def test_harness_detects_misattribution(server, tmp_path):
    """The checker itself: a shard output with two tasks' rewards swapped must fail it."""
    trial = run_trial(server, tmp_path, 7, "output_post_rename")
    assert trial.problems == []
    work = tmp_path / "trial-7"
    cfg = kit.make_config(server.base_url, trial.params["num_repeats"],
                          engine={"max_n": trial.params["max_n"]})
    tasks = kit.load_tasks(work / "tasks.parquet")
    table = pq.read_table(work / "out.parquet").to_pandas()
    a, b = table.index[table["task_index"] == 0][0], table.index[table["task_index"] == 1][0]
    table.loc[[a, b], "completion"] = table.loc[[b, a], "completion"].to_numpy()
    table.to_parquet(work / "out.parquet")
    problems = _check_output({"out": str(work / "out.parquet")}, tasks, cfg)
    assert any("is not its task's" in p for p in problems), problems
    table = table.drop(index=a)
    table.to_parquet(work / "out.parquet")
    problems = _check_output({"out": str(work / "out.parquet")}, tasks, cfg)
    assert any("1 missing" in p for p in problems), problems

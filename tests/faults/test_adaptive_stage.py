"""Adaptive sampling in the rollout stage, against a scripted endpoint whose outcome per rollout
is a fixed function of (prompt, seed): the same decisions as fixed K with fewer requests, and
the same (task, rollout) pairs whatever the shard split, and after a SIGKILL and a rerun. Each
task's rounds are planned as soon as its own last round returned: the pairs and decisions of
the round-synchronous planner on the same rewards, and no task waits for another's round."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from harness import shardkit as kit
from harness.rounds import same_plans, shards_round_synchronous

from rewardprof.decisions.planning.stop_tests import keep_at
from rewardprof.stages import PriorPaths, ShardPaths, shard
from rewardprof.stages.adaptive import prior as adaptive_prior
from rewardprof.stages.adaptive_settings import load_priors
from rewardprof.stages.rollout.shard_job import ShardJob, run_first_round, run_shard
from rewardprof.store.plans import read_plans
from rewardprof.store.shards import ShardPosition
from rewardprof.testing.fake_server import FakeOpenAI

K, TASKS = 8, 30


def answer(prompt: str, seed: int | None) -> str:
    """Task i: never right (i % 3 == 0), always right (i % 3 == 1), else right for about a
    quarter of the seeds; the outcome depends on (prompt, seed) only."""
    text = kit.answer(prompt, 1)  # the right sum: "[question] seed=1 \\boxed{sum}"
    m = re.search(r"What is (\d+) \+", prompt)
    i = int(m.group(1)) if m else 0
    lucky = hashlib.sha256(str(seed).encode()).digest()[0] < 64
    if i % 3 == 0 or (i % 3 == 2 and not lucky):
        return text.replace("\\boxed{", "\\boxed{1")  # a wrong sum
    return text


def _cfg(base_url: str, mode: str, num_shards: int = 1):
    return kit.make_config(base_url, num_repeats=K, num_shards=num_shards, adaptive={"mode": mode})


def _pairs(paths: list[Path]) -> set[tuple[int, int]]:
    out = set()
    for p in paths:
        t = pq.read_table(p, columns=["task_index", "rollout_index"])
        out |= set(zip(t["task_index"].to_pylist(), t["rollout_index"].to_pylist(), strict=True))
    return out


def _run(
    tmp: Path, mode: str, num_shards: int = 1, tasks_n: int = TASKS, rollout: dict | None = None
) -> tuple[list[Path], int]:
    """One run in `tmp` with its own journal, the workflow's steps in order: (shard outputs,
    rollouts requested). bayes: every shard's first round, the priors over all, the rounds."""
    with FakeOpenAI(answer) as server:
        cfg = _cfg(server.base_url, mode, num_shards)
        if rollout:
            cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update=rollout)})
        tasks = kit.make_tasks(tmp, cfg, tasks_n)
        journal, parts, priors = tmp / "journal", [], None
        for i in range(num_shards):
            parts.append(tmp / f"shard{i}.parquet")
            position = ShardPosition(i, num_shards)
            shard.run(cfg, ShardPaths(tasks=tasks, out=parts[i], shard=position))
        if mode == "bayes":
            for i, part in enumerate(parts):
                done = tmp / f"first{i}.json"
                tag = f"{i}-of-{num_shards}"
                run_first_round(ShardJob(cfg, part, journal, done, tag), kit.engine(cfg))
            prior = tmp / "prior.json"
            adaptive_prior.run(cfg, PriorPaths(tasks=tasks, journal=journal, out=prior))
            priors = load_priors(prior)
        outs = []
        for i, part in enumerate(parts):
            out = tmp / f"out{i}.parquet"
            tag = f"{i}-of-{num_shards}"
            run_shard(ShardJob(cfg, part, journal, out, tag), kit.engine(cfg), priors)
            outs.append(out)
        return outs, sum(b.get("n", 1) for b in server.requests)


def test_exact_keeps_the_fixed_k_decisions_with_fewer_rollouts(tmp_path):
    fixed, sent_fixed = _run(tmp_path / "off", "off")
    exact, sent_exact = _run(tmp_path / "exact", "exact")
    rows = pq.read_table(fixed[0], columns=["task_index", "reward"]).to_pandas()
    passes = rows.groupby("task_index")["reward"].sum().sort_index().to_numpy().astype(int)
    plans = read_plans(exact)
    assert plans is not None and len(plans) == TASKS
    assert (plans["keep"].to_numpy() == keep_at(kit_export(), K, passes, 8)).all()
    # a third of the tasks never pass and a third always do: those run to K under exact
    assert sent_exact == plans["planned"].sum() < sent_fixed == TASKS * K
    # every rollout the adaptive run has is the fixed run's, reward for reward
    assert _pairs(exact) <= _pairs(fixed)
    a = pq.read_table(exact[0], columns=["task_index", "rollout_index", "reward"]).to_pandas()
    b = pq.read_table(fixed[0], columns=["task_index", "rollout_index", "reward"]).to_pandas()
    both = a.merge(b, on=["task_index", "rollout_index"])
    assert len(both) == len(a) and (both["reward_x"] == both["reward_y"]).all()
    # the always-right and never-right tasks ran to K; the mixed ones mostly stopped
    assert plans["stopped_early"].sum() >= 5 and (plans["planned"] >= 2).all()


def kit_export():
    return kit.make_config("http://x").export


def test_same_pairs_with_one_or_three_shards(tmp_path):
    one, _ = _run(tmp_path / "one", "exact", 1)
    three, _ = _run(tmp_path / "three", "exact", 3)
    assert _pairs(one) == _pairs(three)
    p1, p3 = read_plans(one), read_plans(three)
    assert p1.equals(p3)


def test_sigkill_and_rerun_sample_the_same_pairs(tmp_path):
    reference, _ = _run(tmp_path / "ref", "exact")
    work = tmp_path / "killed"
    with FakeOpenAI(answer) as server:
        cfg = _cfg(server.base_url, "exact")
        tasks = kit.make_tasks(work, cfg, TASKS)
        out = work / "out.parquet"
        args = {
            "--config-json": json.dumps(cfg.model_dump(mode="json")),
            "--tasks": str(tasks),
            "--journal": str(work / "journal"),
            "--out": str(out),
            "--shard": "0",
            "--num-shards": "1",
        }
        exe = Path(sys.executable).parent / "rewardprof"
        cmd = [str(exe), "rollout", *(part for pair in args.items() for part in pair)]
        # the first round is 30 requests of n=2: hold after 20, in the middle of it, and
        # kill once a request waits at the gate (the attempt cannot have finished)
        server.hold_after(20)
        attempt = subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while server.gate_held == 0:
            assert attempt.poll() is None, "the attempt ended before its kill moment"
            assert time.monotonic() < deadline, "the attempt never reached the gate"
            time.sleep(0.01)
        time.sleep(0.05)
        os.killpg(attempt.pid, signal.SIGKILL)
        assert attempt.wait(30) == -signal.SIGKILL
        assert not out.exists()
        server.hold_after(None)
        rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert _pairs([out]) == _pairs(reference)
    assert read_plans([out]).equals(read_plans(reference))
    fixed, _ = _run(tmp_path / "off", "off")
    want_pairs, want_plans = _round_synchronous("exact", [tasks], fixed)
    assert _pairs([out]) == want_pairs
    same_plans(read_plans([out]), want_plans)


def test_bayes_agrees_with_fixed_k_on_98_percent_with_fewer_rollouts(tmp_path):
    n = 150
    fixed, sent_fixed = _run(tmp_path / "off", "off", tasks_n=n)
    bayes, sent_bayes = _run(tmp_path / "bayes", "bayes", tasks_n=n)
    rows = pq.read_table(fixed[0], columns=["task_index", "reward"]).to_pandas()
    passes = rows.groupby("task_index")["reward"].sum().sort_index().to_numpy().astype(int)
    plans = read_plans(bayes)
    agree = (plans["keep"].to_numpy() == keep_at(kit_export(), K, passes, 8)).mean()
    assert agree >= 0.98
    # the fake engine's outcomes are independent per seed: the first round shows no streaks
    streaks = json.loads((tmp_path / "bayes" / "prior.json").read_text())["streaks"]
    assert streaks["m"]["split_tasks"] > 0 and not streaks["m"]["streaky"]
    # fewer rollouts, though not many fewer at this size: the audit sample (30 of 150 tasks)
    # runs to K, and 4 rollouts cannot tell a never-passing task from one passing 3 % of the
    # time, so 0/4 tasks run on (docs/adaptive.md)
    assert sent_bayes == plans["planned"].sum() < 0.9 * sent_fixed
    # the same run over 3 shards: the same pairs and decisions (one prior over all shards)
    three, _ = _run(tmp_path / "three", "bayes", 3, tasks_n=n)
    assert _pairs(three) == _pairs(bayes) and read_plans(three).equals(plans)


def _round_synchronous(mode: str, shards: list[Path], fixed: list[Path], prior=None):
    """The round-synchronous planner on the shards' tasks files and the rewards of the fixed-K
    run `fixed` (the same (prompt, seed), the same reward)."""
    rewards = pd.concat(pq.read_table(p).to_pandas() for p in fixed)
    return shards_round_synchronous(_cfg("http://x", mode, len(shards)), shards, rewards, prior)


@pytest.mark.parametrize("num_shards", [1, 3])
@pytest.mark.parametrize("mode", ["exact", "bayes"])
def test_the_rounds_give_the_round_synchronous_pairs_and_decisions(tmp_path, mode, num_shards):
    fixed, _ = _run(tmp_path / "off", "off")
    work = tmp_path / mode
    outs, sent = _run(work, mode, num_shards)
    shards = [work / f"shard{i}.parquet" for i in range(num_shards)]
    prior = work / "prior.json" if mode == "bayes" else None
    want_pairs, want_plans = _round_synchronous(mode, shards, fixed, prior)
    assert _pairs(outs) == want_pairs
    same_plans(read_plans(outs), want_plans)
    assert sent == len(want_pairs)  # nothing asked for twice (bayes: first round included)


def test_a_task_goes_on_to_its_next_round_while_another_tasks_round_is_out(tmp_path):
    """The fake server holds task 0's second round until some other task asks for its third:
    with a round barrier no task could, and task 0's held requests would time out. (exact
    mode waits for its label's first round once: whether the label's rewards are 0/1.)"""
    fixed, _ = _run(tmp_path / "off", "off")
    work = tmp_path / "held"
    seen: dict[str, int] = {}  # requests per prompt: one per round (n = the round's size)
    released: list[str] = []
    with FakeOpenAI(answer) as server:

        def hold_task_0(body: dict) -> bool:
            prompt = body["messages"][-1]["content"]
            seen[prompt] = seen.get(prompt, 0) + 1
            if kit.question(0) in prompt:
                return seen[prompt] >= 2
            if seen[prompt] == 3 and not released:
                released.append(prompt)
                server.hold_after(None)  # lets task 0's second round go
            return False

        cfg = _cfg(server.base_url, "exact")
        # a held request that timed out would be a failure of task 0's rollouts
        cfg = cfg.model_copy(
            update={
                "rollout": cfg.rollout.model_copy(
                    update={"request_timeout_s": 20.0, "max_attempts": 1}
                )
            }
        )
        tasks = kit.make_tasks(work, cfg, TASKS)
        out = work / "out.parquet"
        server.hold_after(0, match=hold_task_0)
        run_shard(ShardJob(cfg, tasks, work / "journal", out, "0-of-1"), kit.engine(cfg))
    assert released, "no task asked for a second round while task 0 was held"
    records = pq.read_table(out).to_pandas()
    assert (records["status"] == "ok").all()
    want_pairs, want_plans = _round_synchronous("exact", [tasks], fixed)
    assert _pairs([out]) == want_pairs
    same_plans(read_plans([out]), want_plans)

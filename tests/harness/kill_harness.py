"""Kill harness: run a shard against the fake server, SIGKILL it, rerun, check nothing was lost,
double-counted, misattributed or regenerated. Used by tests/faults/test_kill.py (CI) and
benchmarks/kill_harness.py (many trials).

A trial: a fresh tiny math run (random size, K, request grouping, concurrency, journal segment
size), 1-2 attempts that are SIGKILLed, then a clean attempt. Each attempt talks to a fake
server of its own (stopped once the attempt is dead, so its request log is complete and no late
request of a killed attempt is counted as the next one's). Kill points:

    random             the parent SIGKILLs the attempt once the fake server has answered m of
                       the U requests the attempt needs (m random in 0..U-1) and holds the
                       next one (FakeOpenAI.hold_after), plus 0-20 ms for journal writes in
                       flight: the attempt cannot finish before the kill, on any machine
    torn_line          mid journal append: the n-th append (n <= rollouts the attempt
                       generates) flushes half a JSONL line, then SIGKILL
    segment_pre_rename the n-th journal segment is written to its temp file, then SIGKILL
    segment_post_rename the n-th segment is renamed into place, SIGKILL before its tail is
                       deleted (the same records in a segment and a tail); n <= ceil(rollouts
                       the attempt generates / segment_max_records) <= segments it writes
    output_mid_write   the shard output's temp file is half written, then SIGKILL
    output_pre_rename  the output's temp file is complete, SIGKILL before the rename
    output_post_rename the output is in place, SIGKILL before the process exits

So every kill lands by construction: a killed attempt that exits on its own is a problem. A
second kill at a journal point is skipped when the first left nothing to generate (a segment
kill after the last record was appended).

In `fork` mode an attempt is `run_shard` in a child forked from a preloaded forkserver (the
self-kill points patch the child's own modules: no hook in the product code); in `cli` mode it
is the real `rewardprof rollout` command (random kills only). Either way the kill is a real
SIGKILL of the attempt's whole process group (its verification workers too).

Checks per trial, after the clean attempt:
  - the output has exactly the expected (task_index, rollout_index) pairs, each once;
  - every record is its task's: task_id, seed, completion quoting the task's question, reward;
  - every rollout journaled ok before an attempt is never requested again, and is in the output
    as journaled (same seed, same writer: reused, not regenerated);
  - the clean attempt requested exactly the pairs not yet journaled ok, each once;
  - no temp file is left behind, and a killed attempt never left a partial output;
  - every killed attempt died by the SIGKILL (none finished first).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from harness import preloaded
from harness import shardkit as kit
from rewardprof.manifest.load import validate_config
from rewardprof.stages.rollout.shard_tasks import request_units
from rewardprof.store.journal import read_rows, scan_journal
from rewardprof.testing.fake_server import FakeOpenAI

SELF_KILL_POINTS = [
    "torn_line",
    "segment_pre_rename",
    "segment_post_rename",
    "output_mid_write",
    "output_pre_rename",
    "output_post_rename",
]
KILL_POINTS = ["random", *SELF_KILL_POINTS]
# kill points inside generation: an attempt with nothing left to generate never reaches them
GENERATION_POINTS = ["random", "torn_line", "segment_pre_rename", "segment_post_rename"]


# --- the attempt (child side) --------------------------------------------------------------
def _die() -> None:
    os.killpg(os.getpgid(0), signal.SIGKILL)


class _OsProxy:
    """`os` for one module, with `replace` calling `before`/`after` hooks."""

    def __init__(self, on_replace):
        self._on_replace = on_replace

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def replace(self, src, dst):
        self._on_replace("before")
        os.replace(src, dst)
        self._on_replace("after")


def _install(point: str, nth: int) -> None:
    from rewardprof.core import atomic
    from rewardprof.stages.rollout import output
    from rewardprof.store import journal

    calls = {"n": 0}

    def counted() -> bool:
        calls["n"] += 1
        return calls["n"] == nth

    if point == "torn_line":
        real_append = journal.JournalWriter.append

        def append(self, record):
            if counted():
                line = json.dumps(record, ensure_ascii=False) + "\n"
                self._tail.write(line[: max(1, len(line) // 2)])
                self._tail.flush()
                _die()
            real_append(self, record)

        journal.JournalWriter.append = append
    elif point in ("segment_pre_rename", "segment_post_rename"):
        when = "before" if point == "segment_pre_rename" else "after"
        state = {"armed": False}

        def on_segment(phase: str) -> None:
            if phase == "before":
                state["armed"] = counted()
            if state["armed"] and phase == when:
                _die()

        journal.os = _OsProxy(on_segment)
    elif point in ("output_pre_rename", "output_post_rename"):
        when = "before" if point == "output_pre_rename" else "after"
        atomic.os = _OsProxy(lambda phase: _die() if phase == when else None)
    elif point == "output_mid_write":
        real_read_rows = output.read_rows

        def read_rows_then_die(scan, picks):
            for table in real_read_rows(scan, picks):
                yield table.slice(0, max(1, table.num_rows // 2))
                _die()

        output.read_rows = read_rows_then_die
    elif point != "random":
        raise ValueError(f"unknown kill point {point!r}")


def _attempt(spec: dict[str, Any]) -> None:
    """Forkserver child: one attempt of the shard (maybe with a self-kill point)."""
    os.setpgid(0, 0)  # the parent kills this group: the attempt and its verification workers
    # a forkserver child inherits start method "forkserver"; its verification pool must fork
    # from this (preloaded, warm) process instead of starting a server of its own
    multiprocessing.set_start_method("fork", force=True)
    from rewardprof.stages.rollout.shard_job import ShardJob, run_shard

    if spec.get("point"):
        _install(spec["point"], spec["nth"])
    cfg = validate_config(spec["config"], origin="kill-harness")
    summary = run_shard(
        ShardJob(cfg, spec["tasks"], spec["journal"], spec["out"], "0-of-1"), kit.engine(cfg)
    )
    Path(spec["result"]).write_text(json.dumps(summary))


# --- the trial (parent side) ---------------------------------------------------------------
@dataclass
class Trial:
    seed: int
    point: str
    params: dict[str, Any]
    killed: list[bool] = field(default_factory=list)  # per killed attempt: did the kill land
    journaled_ok: list[int] = field(default_factory=list)  # distinct ok before each attempt
    generated_clean: int = 0
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _context():
    return preloaded.context()  # its preload includes this module and harness.warm_math


def _journal_ok(journal: Path) -> pd.DataFrame:
    scan = scan_journal(journal)
    keys = scan.keys.to_pandas()
    keys = keys[keys["status"] == "ok"]
    picks: dict[int, list[int]] = {}
    for src, row in zip(keys["_src"], keys["_row"], strict=True):
        picks.setdefault(int(src), []).append(int(row))
    parts = [t.to_pandas() for t in read_rows(scan, picks)]
    cols = ["task_index", "rollout_index", "seed", "completion", "writer"]
    return pd.concat(parts, ignore_index=True)[cols] if parts else pd.DataFrame(columns=cols)


def _run_attempt(
    mode: str, spec: dict, kill_when: Any = None, settle_s: float = 0.0, timeout: float = 120
) -> int:
    """Run one attempt; with `kill_when`, SIGKILL its process group `settle_s` after
    `kill_when()` turns true (polled), unless it exited first. Returns the exit code. The
    timeout is for liveness only (a wedged attempt fails the trial instead of hanging CI)."""
    if mode == "fork":
        proc = _context().Process(target=_attempt, args=(spec,))
        proc.start()
        pid = proc.pid
        wait = lambda t: proc.join(t) or proc.exitcode  # noqa: E731
    else:
        cmd = [
            str(Path(sys.executable).parent / "rewardprof"),
            "rollout",
            "--config-json",
            json.dumps(spec["config"]),
            "--tasks",
            spec["tasks"],
            "--journal",
            spec["journal"],
            "--out",
            spec["out"],
            "--shard",
            "0",
            "--num-shards",
            "1",
        ]
        popen = subprocess.Popen(
            cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        pid = popen.pid

        def wait(t):
            try:
                return popen.wait(t)
            except subprocess.TimeoutExpired:
                return None

    deadline = time.monotonic() + timeout
    if kill_when is not None:
        while (code := wait(0.005)) is None:
            if kill_when():
                time.sleep(settle_s)
                _kill_group(pid)
                break
            if time.monotonic() > deadline:
                _kill_group(pid)
                raise RuntimeError(f"attempt never reached its kill moment within {timeout}s")
        else:
            return code  # exited before its kill moment: the caller reports it
    code = wait(timeout)
    if code is None:
        _kill_group(pid)
        raise RuntimeError(f"attempt did not finish within {timeout}s")
    return code


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # not yet its own group: then it has no workers yet
        os.kill(pid, signal.SIGKILL)


def _units_needed(tasks: pd.DataFrame, done: pd.DataFrame, max_n: int) -> int:
    """Requests the attempt needs answered: its units (shard_tasks.request_units) over the missing
    rollouts."""
    have = set(zip(done["task_index"].astype(int), done["rollout_index"].astype(int), strict=True))
    missing = [
        [r for r in range(int(k)) if (int(ti), r) not in have]
        for ti, k in zip(tasks["task_index"], tasks["num_repeats"], strict=True)
    ]
    return sum(1 for _ in request_units(missing, max_n))


def _params(rng: random.Random) -> dict[str, Any]:
    return {
        "num_tasks": rng.randint(3, 10),
        "num_repeats": rng.randint(1, 5),
        "max_n": rng.choice([1, 2, 3, 16]),
        "concurrency": rng.randint(1, 6),
        "segment_max_records": rng.choice([1, 2, 3, 5, 1000]),
        "segment_interval_s": rng.choice([0.01, 0.05, 30.0]),
        "latency_s": rng.choice([0.0, 0.002, 0.01]),
        "kills": rng.choice([1, 1, 2]),
        "fault_rate": rng.choice([0.0, 0.0, 0.1]),
    }


def run_trial(root: Path, seed: int, point: str | None = None, mode: str = "fork") -> Trial:
    rng = random.Random(seed)
    point = point or rng.choice(KILL_POINTS if mode == "fork" else ["random"])
    p = _params(rng)
    t0 = time.monotonic()
    trial = Trial(seed, point, p)
    work = root / f"trial-{seed}"
    # request_timeout_s: a request held at the gate must not time out (and be retried) before
    # the parent's kill; faults here are 500s only, answered at once
    cfg = kit.make_config(
        "http://127.0.0.1:9/v1",
        p["num_repeats"],
        rollout={
            "concurrency": p["concurrency"],
            "segment_max_records": p["segment_max_records"],
            "segment_interval_s": p["segment_interval_s"],
            "max_attempts": 20,
            "max_failed_fraction": 1.0,
            "request_timeout_s": 300,
        },
        engine={"max_n": p["max_n"]},
    )
    tasks_path = kit.make_tasks(work, cfg, p["num_tasks"])
    tasks = kit.load_tasks(tasks_path)
    total = p["num_tasks"] * p["num_repeats"]
    spec = {
        "config": cfg.model_dump(mode="json"),
        "tasks": str(tasks_path),
        "journal": str(work / "journal"),
        "out": str(work / "out.parquet"),
        "result": str(work / "result.json"),
    }
    kills_left = p["kills"]
    for attempt in itertools.count():
        before = _journal_ok(Path(spec["journal"]))
        have = kit.record_pairs(before, tasks)  # distinct (a segment and its tail may repeat)
        trial.journaled_ok.append(len(have))
        todo = total - len(have)
        clean = kills_left == 0 or (todo == 0 and point in GENERATION_POINTS)
        faults = 0.0 if clean else p["fault_rate"]
        frng = random.Random(seed * 1000 + attempt)
        kill_when, settle_s = None, 0.0
        attempt_spec = dict(spec)
        with FakeOpenAI(kit.answer, latency_s=p["latency_s"]) as server:
            server.fault_fn = lambda body, r=frng, f=faults: "500" if r.random() < f else None
            attempt_spec["config"] = json.loads(json.dumps(spec["config"]))
            attempt_spec["config"]["engine"]["base_url"] = server.base_url
            if not clean and point == "random":
                # answer m of the U requests the attempt needs, hold the rest: it cannot
                # finish, and is killed once it waits for a held answer
                server.hold_after(rng.randint(0, _units_needed(tasks, before, p["max_n"]) - 1))
                kill_when = lambda s=server: s.gate_held > 0  # noqa: E731
                settle_s = rng.choice([0.0, rng.uniform(0.0, 0.02)])  # journal writes in flight
            elif not clean:
                segments = -(-todo // p["segment_max_records"])  # the fewest it can write
                nth = {
                    "torn_line": rng.randint(1, max(1, todo)),
                    "segment_pre_rename": rng.randint(1, max(1, segments)),
                    "segment_post_rename": rng.randint(1, max(1, segments)),
                }.get(point, 1)
                attempt_spec.update(point=point, nth=nth)
            out_before = Path(spec["out"]).exists()
            code = _run_attempt(mode, attempt_spec, kill_when, settle_s)
        # the attempt is dead and its server stopped: this is every request it made
        asked = kit.request_pairs(server.requests)
        reasked = sorted(set(asked) & have)
        if reasked:
            trial.problems.append(
                f"attempt {attempt}: {len(reasked)} journaled rollouts "
                f"requested again, e.g. {reasked[0]}"
            )
        if clean:
            if code != 0:
                trial.problems.append(f"clean attempt exited with {code}")
            elif sorted(asked) != sorted(kit.record_pairs(_expected(tasks, cfg), tasks) - have):
                trial.problems.append(
                    "clean attempt did not request exactly the missing "
                    f"rollouts once each ({len(asked)} requested, "
                    f"{todo} missing)"
                )
            trial.generated_clean = len(asked)
            break
        kills_left -= 1
        trial.killed.append(code == -signal.SIGKILL)
        if code != -signal.SIGKILL:
            trial.problems.append(
                f"attempt {attempt}: the {point} kill did not land: the "
                f"attempt exited with {code} on its own"
            )
        if Path(spec["out"]).exists() and not out_before:
            trial.problems.extend(f"after kill: {x}" for x in check_output(spec, tasks, cfg))
    if not trial.problems:
        trial.problems.extend(check_output(spec, tasks, cfg))
        trial.problems.extend(_check_reused(spec, tasks))
        leftovers = [q.name for q in work.rglob(".*") if ".tmp" in q.name]
        if leftovers:
            trial.problems.append(f"temp files left behind: {leftovers}")
    trial.seconds = time.monotonic() - t0
    return trial


def _expected(tasks: pd.DataFrame, cfg) -> pd.DataFrame:
    from rewardprof.store.seeds import task_seed

    rows = [
        (ti, r, task_seed(cfg.sampling.seed, tid) + r)
        for ti, tid, k in zip(
            tasks["task_index"], tasks["task_id"], tasks["num_repeats"], strict=True
        )
        for r in range(k)
    ]
    return pd.DataFrame(rows, columns=["task_index", "rollout_index", "seed"])


def check_output(spec: dict, tasks: pd.DataFrame, cfg) -> list[str]:
    """What is wrong with the shard output at spec["out"] (empty when it is whole): records
    that fail kit.check_records, duplicate, missing or unexpected keys, failed records."""
    out = Path(spec["out"])
    if not out.exists():
        return ["no shard output"]
    try:
        rec = pq.read_table(out).to_pandas()
    except Exception as exc:  # an unreadable output is exactly what this harness hunts
        return [f"shard output unreadable: {exc}"]
    problems = kit.check_records(rec, tasks, cfg)
    keys = list(zip(rec["task_index"], rec["rollout_index"], strict=True))
    expected = set(
        zip(*_expected(tasks, cfg)[["task_index", "rollout_index"]].T.values, strict=True)
    )
    if len(keys) != len(set(keys)):
        problems.append(f"{len(keys) - len(set(keys))} duplicate keys in the output")
    if set(keys) != expected:
        problems.append(
            f"output keys: {len(expected - set(keys))} missing, "
            f"{len(set(keys) - expected)} unexpected"
        )
    if (rec["status"] != "ok").any():
        problems.append(f"failed records in the output: {rec['status'].value_counts()}")
    return problems


def _check_reused(spec: dict, tasks: pd.DataFrame) -> list[str]:
    """Every rollout journaled ok by a killed attempt is in the output as journaled."""
    out = pq.read_table(spec["out"]).to_pandas().set_index(["task_index", "rollout_index"])
    journal = _journal_ok(Path(spec["journal"]))
    problems = []
    merged = journal.merge(
        out[["seed", "completion", "writer"]].reset_index(),
        on=["task_index", "rollout_index"],
        how="left",
        suffixes=("", "_out"),
    )
    differ = merged[
        (merged["seed"] != merged["seed_out"]) | (merged["completion"] != merged["completion_out"])
    ]
    if len(differ):
        problems.append(f"{len(differ)} journaled rollouts differ from the output's")
    # a journaled key is produced by exactly one writer (nothing was generated twice)
    per_key = (
        journal.drop_duplicates(["task_index", "rollout_index", "writer"])
        .groupby(["task_index", "rollout_index"])
        .size()
    )
    if (per_key > 1).any():
        problems.append(f"{int((per_key > 1).sum())} rollouts generated by two attempts")
    return problems


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0, help="first trial seed")
    ap.add_argument("--mode", choices=["fork", "cli"], default="fork")
    ap.add_argument("--point", choices=KILL_POINTS, default=None, help="default: random mix")
    ap.add_argument("--json", help="write every trial's result here")
    args = ap.parse_args(argv)
    from rewardprof.environments.math import math_equal

    math_equal("1", "1", 5)  # warm SymPy once (verification workers fork from attempts)
    results, t0 = [], time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.trials):
            trial = run_trial(Path(tmp), args.seed + i, args.point, args.mode)
            results.append(trial)
            status = "ok" if not trial.problems else "FAIL: " + "; ".join(trial.problems)
            print(
                f"trial {trial.seed:4d} {trial.point:19s} kills landed {trial.killed} "
                f"journaled {trial.journaled_ok} regenerated {trial.generated_clean:3d} "
                f"{trial.seconds:5.2f}s {status}",
                flush=True,
            )
    failed = [t for t in results if t.problems]
    landed = sum(sum(t.killed) for t in results)
    by_point: dict[str, int] = {}
    for t in results:
        by_point[t.point] = by_point.get(t.point, 0) + 1
    print(
        f"\n{len(results)} trials ({args.mode} mode), {len(failed)} failed; "
        f"{landed} kills landed; {sum(t.generated_clean for t in results)} rollouts "
        f"generated after the kills, {sum(t.journaled_ok[-1] for t in results)} reused; "
        f"by kill point {dict(sorted(by_point.items()))}; "
        f"{time.monotonic() - t0:.0f}s wall"
    )
    if args.json:
        Path(args.json).write_text(json.dumps([t.__dict__ for t in results], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

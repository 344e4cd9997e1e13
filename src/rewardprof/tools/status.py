"""status: where a run stands, from its run directory alone (works on a Slurm login node).

Per shard and overall: rollouts collected of those expected, rollouts/s, tokens/s, ETA,
failures by kind, and which shards stopped (with their last error). Counts come from the
journal (read-only: key columns only, no lock taken, so running jobs are never disturbed); the
state, rates and errors from each rollout job's heartbeat (`rollouts/status/<i>-of-<n>.json`,
stages/rollout/heartbeat.py): with several engine replicas, also each replica's state,
requests in flight, done and errors as the jobs see them. `--watch` redraws it every few seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.compute as pc
import pyarrow.parquet as pq

from rewardprof.core.errors import RewardprofError
from rewardprof.core.kinds import OK
from rewardprof.core.redaction import redact
from rewardprof.environments import get_environment_class
from rewardprof.store.collected import resolve
from rewardprof.store.heartbeats import (
    FIRST_ROUND_DONE,
    FIRST_ROUND_PHASE,
    eta_text,
    is_live,
    rates,
    read_heartbeats,
)
from rewardprof.store.journal import JournalScan, scan_journal
from rewardprof.store.layout import RunLayout, current_num_shards
from rewardprof.store.plans import read_plans
from rewardprof.store.shards import shard_of, shard_tag
from rewardprof.tools import add_run_dir_arguments
from rewardprof.tools.status_eta import duration_text, run_eta_s, startup_s, state_elapsed


class StatusError(RewardprofError):
    """The directory is not a run directory, or has no shards to report on yet."""


def _num_shards(layout: RunLayout, given: int | None) -> int:
    """The shard layout to report: given, else the one written last (store/layout.py: a
    reshard writes new shard files before its jobs start)."""
    n = given or current_num_shards(layout)
    if n is None:
        raise StatusError(
            f"{layout.shards_dir}: no shard files yet (materialize and shard have not run); "
            f"nothing to report"
        )
    return n


def _shard_tasks(layout: RunLayout, n: int) -> pd.DataFrame:
    """task_index, task_id, num_repeats, shard of every task (and label, environment when the
    materialized table is there): from the materialized table (the plan is whole before any
    shard file or output exists), else from the shard files."""
    if layout.tasks.exists():
        columns = ["task_index", "task_id", "num_repeats", "label", "environment"]
        t = pq.read_table(layout.tasks, columns=columns).to_pandas()
        return t.assign(shard=shard_of(t["task_index"], n))
    parts = []
    for i in range(n):
        path = layout.shard_tasks(i, n)
        if path.exists():
            t = pq.read_table(path, columns=["task_index", "task_id", "num_repeats"]).to_pandas()
            parts.append(t.assign(shard=i))
    if not parts:
        return pd.DataFrame(columns=["task_index", "task_id", "num_repeats", "shard"])
    return pd.concat(parts, ignore_index=True)


def _gen_key(scan: JournalScan, beats: dict[int, dict[str, Any]]) -> str | None:
    """The model + sampling fingerprint the jobs run under: the newest heartbeat's, else the
    newest journal record's."""
    keyed = [b for b in beats.values() if b.get("gen_key")]
    if keyed:
        return max(keyed, key=lambda b: b.get("updated_at") or 0)["gen_key"]
    keys = scan.keys
    if keys.num_rows == 0:
        return None
    newest = pc.fill_null(keys.column("finished_at").cast("float64"), -1.0)
    return keys.column("gen_key")[int(pc.index(newest, pc.max(newest)).as_py())].as_py()


def collect(run_dir: str | Path, num_shards: int | None = None) -> dict[str, Any]:
    """The status of a run directory as a JSON-able dict (what `format_status` prints)."""
    layout = RunLayout(run_dir)
    if not layout.root.is_dir():
        raise StatusError(f"{layout.root}: no such run directory (results/<run>)")
    n = _num_shards(layout, num_shards)
    now = time.time()
    beats = read_heartbeats(layout, n)
    tasks = _shard_tasks(layout, n)
    scan = scan_journal(layout.journal)
    key = _gen_key(scan, beats)
    winners = resolve(scan, tasks, key).winners if key else pd.DataFrame()
    by_shard = _counts_by_shard(winners, n)
    expected = tasks.groupby("shard")["num_repeats"].sum().to_dict() if len(tasks) else {}
    shards = [
        _shard_row(layout, i, n, beats.get(i, {}), by_shard[i], expected.get(i), now)
        for i in range(n)
    ]
    return {
        "episodes": _episodes(tasks, winners),
        "replicas": replicas_of(beats.values(), now),
        "run_dir": str(layout.root),
        "num_shards": n,
        **_run_totals(shards, beats, now),
        "shards": shards,
        "taken_at": now,
    }


def _counts_by_shard(winners: pd.DataFrame, n: int) -> dict[int, Counter[str]]:
    """Shard index -> the journal's counted rollouts of its tasks by status."""
    by_shard: dict[int, Counter[str]] = {i: Counter() for i in range(n)}
    if len(winners):
        sizes = winners.groupby([shard_of(winners["task_index"], n), "status"]).size()
        for (i, status), count in sizes.items():
            by_shard[int(i)][status] = int(count)
    return by_shard


def _shard_row(
    layout: RunLayout,
    i: int,
    n: int,
    beat: dict[str, Any],
    counts: Counter[str],
    expected: int | None,
    now: float,
) -> dict[str, Any]:
    """Shard i's row: its state from its output and heartbeat, its counts from the journal;
    `expected`: its tasks' num_repeats summed (None while its tasks are not known)."""
    done = sum(counts.values())
    exp = int(expected) if expected is not None else None
    output = layout.shard_rollouts(i, n)
    plan = _adaptive_plan(output)
    live = is_live(beat, now)
    rate, tokens = rates(beat) if beat else (0.0, 0.0)
    state, beat, first_exp = _shard_state(output.exists(), beat, live, done, now)
    return {
        "shard": shard_tag(i, n),
        "state": state,
        "elapsed_s": state_elapsed(state, beat, now),
        "done": done,
        # adaptive sampling: what the finished shard's plan asked for (K is the most)
        "expected": plan["planned"] if plan else first_exp or exp,
        "max_expected": exp,
        "stopped_early": plan["stopped_early"] if plan else 0,
        "ok": counts[OK],
        "failures": {k: v for k, v in sorted(counts.items()) if k != OK},
        "rollouts_per_s": rate,
        "tokens_per_s": tokens,
        "eta": eta_text((first_exp or exp or 0) - done, rate) if live and exp is not None else None,
        "where": f"{beat['host']}:{beat['pid']}" if beat.get("host") else None,
        "error": beat.get("error") or (beat.get("last_error") if state != "done" else None),
        "updated_at": beat.get("updated_at"),
    }


def _shard_state(
    finished: bool, beat: dict[str, Any], live: bool, done: int, now: float
) -> tuple[str, dict[str, Any], int | None]:
    """A shard's state; its heartbeat (a lost job's with the silence as its error); the
    rollouts bayes' first round expects while it runs (else None)."""
    if finished:
        return "done", beat, None
    if live or beat.get("state") in ("failed", "stopped", FIRST_ROUND_DONE):
        # bayes' first-round job: running its first round, then waiting for the prior
        first_round = beat.get("phase") == FIRST_ROUND_PHASE
        state = "first_round" if first_round and beat["state"] == "running" else beat["state"]
        if first_round and beat.get("expected") is not None and state != FIRST_ROUND_DONE:
            return state, beat, int(beat["expected"])  # done/expected and ETA: the first round's
        return state, beat, None
    if beat:
        # said starting/running, then went silent: killed, node lost
        age = now - float(beat.get("updated_at") or 0)
        error = f"no heartbeat for {age:.0f}s (killed, or its node lost)"
        return "lost", dict(beat, error=error), None
    # rollouts journaled, no job: stopped before its first heartbeat, or an older run
    return ("pending" if done == 0 else "waiting"), beat, None


def _run_totals(
    shards: list[dict[str, Any]], beats: dict[int, dict[str, Any]], now: float
) -> dict[str, Any]:
    """The whole run's counts, rates and ETA, from its shards' rows."""
    running = [s for s in shards if s["state"] in ("starting", "running", "first_round")]
    eta_s = run_eta_s(shards, startup_s(list(beats.values())), now) if running else None
    failures: Counter[str] = Counter()
    for s in shards:
        failures.update(s["failures"])
    return {
        "expected": sum(s["expected"] or 0 for s in shards),
        "max_expected": sum(s["max_expected"] or 0 for s in shards),
        "stopped_early": sum(s["stopped_early"] for s in shards),
        "done": sum(s["done"] for s in shards),
        "ok": sum(s["ok"] for s in shards),
        "failures": dict(sorted(failures.items())),
        "running": len(running),
        "finished": sum(s["state"] == "done" for s in shards),
        "rollouts_per_s": sum(s["rollouts_per_s"] for s in running),
        "tokens_per_s": sum(s["tokens_per_s"] for s in running),
        "eta": duration_text(eta_s) if running and eta_s is not None else None,
        "eta_s": eta_s,
        "stopped": [s["shard"] for s in shards if s["state"] in ("failed", "stopped", "lost")],
    }


def _episodes(tasks: pd.DataFrame, winners: pd.DataFrame) -> list[dict[str, Any]]:
    """Per entry whose environment acts: episodes finished (journaled whole) of those expected,
    and how many were scored; an episode under way is not journaled until it ends."""
    if "environment" not in tasks.columns:
        return []
    out = []
    for (label, env), group in tasks.groupby(["label", "environment"], sort=True):
        try:
            acts = getattr(get_environment_class(env), "acts", False)
        except KeyError:  # a plugin not installed here: status still reports the rest
            acts = False
        if not acts:
            continue
        mine = winners[winners["task_index"].isin(group["task_index"])] if len(winners) else winners
        out.append(
            {
                "label": label,
                "environment": env,
                "done": len(mine),
                "expected": int(group["num_repeats"].sum()),
                "ok": int((mine["status"] == OK).sum()) if len(mine) else 0,
            }
        )
    return out


def _adaptive_plan(shard_output: Path) -> dict[str, int] | None:
    """A finished shard's adaptive plan (in its output's metadata): rollouts planned, tasks
    stopped early; None for a fixed-K shard or one not finished."""
    if not shard_output.exists():
        return None
    plans = read_plans([shard_output])
    if plans is None:
        return None
    return {
        "planned": int(plans["planned"].sum()),
        "stopped_early": int(plans["stopped_early"].sum()),
    }


def replicas_of(beats, now: float) -> list[dict[str, Any]]:
    """Each engine replica the rollout jobs balance over (their heartbeats' `replicas`),
    summed over the jobs: in flight (live jobs only), done, errors; its state is `in` when
    some live job has it in, else what the jobs last saw."""
    found: dict[str, dict[str, Any]] = {}
    for beat in beats:
        live = is_live(beat, now)
        for r in beat.get("replicas") or []:
            if not isinstance(r, dict) or not isinstance(r.get("url"), str):
                continue
            row = found.setdefault(
                r["url"],
                {"url": r["url"], "state": None, "in_flight": 0, "done": 0, "errors": 0},
            )
            row["done"] += int(r.get("done") or 0)
            row["errors"] += int(r.get("errors") or 0)
            if live:
                row["in_flight"] += int(r.get("in_flight") or 0)
            if row["state"] != "in" and (live or row["state"] is None):
                row["state"] = r.get("state")
            if r.get("last_error"):
                row["last_error"] = r["last_error"]
    return list(found.values())


def _kinds(failures: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in failures.items()) or "-"


def _headline(st: dict[str, Any]) -> str:
    """The counts of the run: done/expected, or, adaptive sampling, planned vs fixed K."""
    pct = 100 * st["done"] / st["expected"] if st["expected"] else 0.0
    all_done = st["num_shards"] and st["finished"] == st["num_shards"]
    head = f"{st['done']}/{st['expected']} rollouts ({pct:.1f}%)"
    if st["max_expected"] != st["expected"]:  # some shard finished with an adaptive plan
        head += f" (planned; {st['max_expected']} at fixed K)"
    if all_done:
        head = f"done: {head}"
        if st["stopped_early"]:
            head += f", stopped early {st['stopped_early']} tasks"
    return head


def format_status(st: dict[str, Any]) -> str:
    when = datetime.fromtimestamp(st["taken_at"]).strftime("%H:%M:%S")
    lines = [
        f"{st['run_dir']} at {when}: {_headline(st)}, "
        f"{st['ok']} ok, failures: {_kinds(st['failures'])}",
        f"shards: {st['finished']} of {st['num_shards']} done, {st['running']} running, "
        f"{len(st['stopped'])} stopped; {st['rollouts_per_s']:.2f} rollouts/s, "
        f"{st['tokens_per_s']:.0f} tokens/s, ETA {st['eta'] or '-'}",
        "",
        f"{'shard':<10} {'state':<11} {'for':>7} {'done/expected':>15} {'rollouts/s':>10} "
        f"{'tokens/s':>9} {'ETA':>7}  failures",
    ]
    for s in st["shards"]:
        exp = "?" if s["expected"] is None else str(s["expected"])
        lines.append(
            f"{s['shard']:<10} {s['state']:<11} {duration_text(s['elapsed_s']):>7} "
            f"{s['done']:>7}/{exp:<7} "
            f"{s['rollouts_per_s']:>10.2f} {s['tokens_per_s']:>9.0f} {s['eta'] or '-':>7}  "
            f"{_kinds(s['failures'])}"
        )
    if st.get("replicas"):
        lines += ["", f"{'replica':<40} {'state':<9} {'in flight':>9} {'done':>8} {'errors':>7}"]
        lines += [
            f"{r['url']:<40} {r['state'] or '?':<9} {r['in_flight']:>9} {r['done']:>8} "
            f"{r['errors']:>7}"
            for r in st["replicas"]
        ]
    if st.get("episodes"):
        lines += ["", f"{'episodes of':<24} {'environment':<34} {'done/expected':>15} {'ok':>6}"]
        lines += [
            f"{e['label']:<24} {e['environment']:<34} {e['done']:>7}/{e['expected']:<7} "
            f"{e['ok']:>6}"
            for e in st["episodes"]
        ]
    problems = [s for s in st["shards"] if s["state"] in ("failed", "stopped", "lost")]
    if problems:
        lines += ["", "stopped shards:"]
        lines += [f"  {s['shard']} ({s['where'] or '?'}): {s['error'] or '?'}" for s in problems]
    return "\n".join(lines)


def run_command(args: argparse.Namespace) -> int:
    """`rewardprof status`: print the status once, or redraw it every --watch seconds until
    every shard is done (Ctrl-C stops watching)."""
    try:
        while True:
            st = collect(args.run_dir, args.num_shards)
            text = json.dumps(st, indent=2) if args.json else format_status(st)
            # status files of older jobs may quote a credential: masked here too
            text = redact(text)
            if args.watch and sys.stdout.isatty():
                print("\x1b[H\x1b[2J", end="")  # redraw in place on a terminal
            print(text, flush=True)
            if not args.watch or st["finished"] == st["num_shards"]:
                return 0
            time.sleep(args.watch)
            if not sys.stdout.isatty():
                print(flush=True)  # snapshots one blank line apart in a file
    except KeyboardInterrupt:
        return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of `rewardprof status` (the command table is in rewardprof.cli)."""
    add_run_dir_arguments(p, "shard layout to report (default: the one written last)")
    p.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=10.0,
        default=None,
        metavar="SECONDS",
        help="redraw every SECONDS (default 10) until every shard is done",
    )
    p.add_argument("--json", action="store_true", help="print the status as JSON")

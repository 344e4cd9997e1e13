"""Adaptive sampling in the rollout stage: rounds planned by decisions/planning/round_plan.py.

A shard's job plans from its journal, samples what the plan is missing, and plans each task
again as soon as its own rollouts returned (decisions/planning/task_rounds.py: no barrier between
the shard's tasks), until every task's decision is settled or it has num_repeats rollouts. The plan
is a function of the rewards alone (never of arrival order, shard split or concurrency), so a
killed job's rerun, which replans from the journal, samples the same (task, rollout) pairs, and
at the end the round-synchronous plan on the journal must be the rounds' plan (checked_plan).
Failures: a rollout that failed in this job is known (the plan treats it as unknown reward, it
is not retried in a loop); one that failed in an earlier attempt is retried, as in a fixed-K
run.

The plan is recorded in the shard output's Parquet metadata (store/plans.py: task_index,
planned, stopped_early, keep per task), so merge, check and profile know how many rollouts a task
stopped at without the config.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from rewardprof.core.atomic import write_json_atomic
from rewardprof.core.config import MAX_NUM_REPEATS, Config
from rewardprof.core.kinds import OK
from rewardprof.decisions.audit.sample import (
    audit_of,
    audit_shares,
    with_audit_cutoffs,
    with_audit_shares,
)
from rewardprof.decisions.planning.round_plan import (
    AdaptiveSettings,
    Plan,
    Records,
    plan,
    uses_posterior,
)
from rewardprof.decisions.planning.stop_budget import with_stop_thresholds
from rewardprof.decisions.planning.stop_tests import posterior_fn_for
from rewardprof.decisions.planning.streaks import StreakTest, round_ends, streak_tests
from rewardprof.decisions.planning.task_rounds import TaskRounds
from rewardprof.decisions.priors.label import LabelPrior, fit_label_priors
from rewardprof.decisions.priors.posterior import MixturePrior, fit_prior
from rewardprof.decisions.priors.warm_start import (
    PriorSet,
    bayes_warm_labels,
    prior_keys_of,
    warm_priors,
)
from rewardprof.stages import StagePaths
from rewardprof.stages.rollout.seeds import gen_key
from rewardprof.store import plans
from rewardprof.store.collected import resolve
from rewardprof.store.earlier_profile import EARLIER_COLUMNS
from rewardprof.store.journal import scan_journal


def settings_of(cfg: Config) -> AdaptiveSettings | None:
    """The planner's settings, None when adaptive sampling is off. bayes runs exact's rounds
    (the exact test alone) until a task has adaptive.min_rollouts, and its prior's test from
    there on; with posterior keep rules (which exact cannot settle) every task's first round
    is min_rollouts."""
    a = cfg.adaptive
    if a.mode == "off":
        return None
    staged = a.mode == "exact" or not uses_posterior(cfg.export)
    return AdaptiveSettings(
        mode=a.mode,
        first=a.round_size if staged else a.min_rollouts,
        round_size=a.round_size,
        delta=a.delta,
        group_size=cfg.profile.group_size,
        ci_level=cfg.profile.ci_level,
        signal_threshold=cfg.profile.signal_threshold,
        bayes_from=a.min_rollouts if a.mode == "bayes" else 0,
    )


def first_round_settings(cfg: Config) -> AdaptiveSettings | None:
    """bayes' first round, what its priors are fitted on: exact's rounds, no task past
    adaptive.min_rollouts (None: every task's first min_rollouts, with posterior keep rules)."""
    settings = settings_of(cfg)
    if settings is None or settings.first >= cfg.adaptive.min_rollouts:
        return None
    return replace(settings, mode="exact", bayes_from=0, stop_at=cfg.adaptive.min_rollouts)


def _winners(tasks: pd.DataFrame, journal_dir: Path, gen_key: str) -> pd.DataFrame:
    return resolve(
        scan_journal(journal_dir), tasks[["task_index", "task_id", "num_repeats"]], gen_key
    ).winners


def first_round_ok(cfg: Config, tasks: pd.DataFrame, journal_dir: Path, gen_key: str):
    """The journaled ok rollouts of the first round (index below adaptive.min_rollouts): the
    prior job's one scan of the journal, which the counts and the streak test read."""
    first = np.minimum(cfg.adaptive.min_rollouts, tasks["num_repeats"].to_numpy(np.int64))
    w = _winners(tasks.assign(num_repeats=first), journal_dir, gen_key)
    return w[w["status"] == OK]


def first_round_streaks(cfg: Config, tasks: pd.DataFrame, w: pd.DataFrame) -> dict[str, StreakTest]:
    """Per label, whether its first round (`w`: first_round_ok) shows within-task correlation
    (decisions/planning/streaks.py); none tested where the first round is not exact's rounds
    (posterior keep rules)."""
    phase = first_round_settings(cfg)
    if phase is None:
        return {}
    label = pd.Series(tasks["label"].to_numpy(dtype=object), index=tasks["task_index"])
    passed = w["reward"].to_numpy(dtype=float) >= cfg.profile.pass_threshold
    return streak_tests(
        label.loc[w["task_index"]].to_numpy(),
        w["task_index"],
        w["rollout_index"],
        passed,
        round_ends(phase.first, phase.round_size, cfg.adaptive.min_rollouts),
    )


def first_round_counts(
    cfg: Config, tasks: pd.DataFrame, w: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, dict[str, bool]]:
    """Per task (n, c) of the first round (`w`: first_round_ok): ok rollouts count, failed ones
    do not; and label -> every first-round reward is 0 or 1."""
    reward = w["reward"].to_numpy(dtype=float)
    passed = reward >= cfg.profile.pass_threshold
    by_task = pd.DataFrame(
        {
            "task_index": w["task_index"].to_numpy(),
            "passed": passed,
            "binary": np.isin(reward, [0.0, 1.0]),
        }
    )
    counts = by_task.groupby("task_index").agg(
        size=("passed", "size"), sum=("passed", "sum"), binary=("binary", "all")
    )
    counts = counts.reindex(tasks["task_index"].to_numpy())
    labels = tasks["label"].to_numpy(dtype=object)
    binary = counts["binary"].fillna(True).astype(bool).to_numpy()
    by_label = {lbl: bool(binary[labels == lbl].all()) for lbl in pd.unique(labels)}
    n = counts["size"].fillna(0).to_numpy(np.int64)
    return n, counts["sum"].fillna(0).to_numpy(np.int64), by_label


def stopping_priors(
    cfg: Config,
    tasks: pd.DataFrame,
    counts: tuple[np.ndarray, np.ndarray, dict[str, bool]],
    mixtures: dict[str, MixturePrior],
    gen_key: str,
    streaky: frozenset[str] | set[str] = frozenset(),
) -> tuple[dict[str, dict], dict | None]:
    """Each label's LabelPrior (decisions/priors/label.py) on the first round (`counts`:
    first_round_counts; `mixtures`: each label's profile-family prior on them; `streaky`
    labels: the exact test, decisions/planning/streaks.py), with the share of its tasks in the audit
    sample (decisions/audit/sample.py); with adaptive.warm_start, the warm keys' priors too, and the
    warm start's record (task_id -> key, the fitted drift)."""
    n, c, binary = counts
    labels = tasks["label"].to_numpy(dtype=object)
    fitted = fit_label_priors(n, c, labels, binary, mixtures=mixtures, streaky=streaky)
    sizes = {str(lbl): int((labels == lbl).sum()) for lbl in pd.unique(labels)}
    shares = audit_shares(sizes, cfg.adaptive.audit_share, cfg.adaptive.audit_min_tasks)
    fitted = with_audit_shares(fitted, shares, salt=gen_key)  # warm keys inherit both
    warm = None
    if cfg.adaptive.warm_start:
        ids = tasks["task_id"].to_numpy(dtype=object)
        earlier = earlier_counts(Path(cfg.adaptive.warm_start))
        fitted, drift = warm_priors(ids, labels, n, c, fitted, earlier, streaky=streaky)
        for lbl in bayes_warm_labels(fitted, ids, labels):  # audited although exact on its own
            fitted[lbl] = replace(fitted[lbl], audit_share=shares[lbl])
        warm = {
            "profile": cfg.adaptive.warm_start,
            "earlier_tasks": len(earlier),
            "matched": len(fitted.task_keys),
            "drift": drift.as_dict() if drift else None,
            "task_keys": fitted.task_keys,
        }
    fitted = _with_thresholds(cfg, tasks, fitted)
    return {lbl: p.as_dict() for lbl, p in fitted.items()}, warm


def _with_thresholds(cfg: Config, tasks: pd.DataFrame, fitted):
    """Each bayes prior with its stopping threshold per K of its tasks (stop_budget.py), and
    each label's audit cutoff (decisions/audit/sample.py)."""
    settings = settings_of(cfg)
    ids = tasks["task_id"].to_numpy(dtype=object)
    labels = tasks["label"].to_numpy(dtype=object)
    keys = prior_keys_of(ids, labels, fitted)
    keys = labels if keys is None else keys
    k = tasks["num_repeats"].to_numpy(np.int64)
    post_fns = None
    if uses_posterior(cfg.export):
        post_fns = {
            key: posterior_fn_for(
                p.mixture,
                level=settings.ci_level,
                group_size=settings.group_size,
                signal_threshold=settings.signal_threshold,
            )
            for key, p in fitted.items()
            if p.mixture is not None
        }
    thresholded = with_stop_thresholds(
        dict(fitted), keys, k, labels, settings, cfg.export, post_fns
    )
    if isinstance(fitted, PriorSet):
        thresholded = PriorSet(thresholded, fitted.task_keys)
    return with_audit_cutoffs(thresholded, ids, labels)


def earlier_counts(path: Path) -> dict[str, tuple[int, int]]:
    """task_id -> (num_rollouts, num_passed) of an earlier profile's tasks with rollouts."""
    prof = pq.read_table(path, columns=list(EARLIER_COLUMNS)).to_pandas()
    prof = prof[prof["num_rollouts"] > 0]
    return {
        str(t): (int(n), int(c))
        for t, n, c in zip(prof["task_id"], prof["num_rollouts"], prof["num_passed"], strict=True)
    }


def write_priors(cfg: Config, paths: StagePaths) -> dict:
    """Fit the priors on the journaled first round of every task (paths.tasks: the whole tasks
    table) and write them to paths.out (adaptive/prior.json), which every later round reads."""
    tasks = pq.read_table(
        paths.need("tasks"), columns=["task_index", "task_id", "label", "num_repeats"]
    ).to_pandas()
    key = gen_key(cfg, cfg.model_name)
    first = first_round_ok(cfg, tasks, paths.need("journal"), key)
    counts = first_round_counts(cfg, tasks, first)
    n, c, _ = counts
    labels = tasks["label"].to_numpy(dtype=object)
    # each label's profile-family prior (decisions/priors/posterior.py): recorded, and kept with its
    # LabelPrior for the posterior keep rules
    mixtures = {lbl: fit_prior(n[labels == lbl], c[labels == lbl]) for lbl in pd.unique(labels)}
    streaks = first_round_streaks(cfg, tasks, first)
    result = {
        "min_rollouts": cfg.adaptive.min_rollouts,
        "gen_key": key,
        "labels": {lbl: m.as_dict() for lbl, m in mixtures.items()},
        "streaks": {str(lbl): test.as_dict() for lbl, test in streaks.items()},
    }
    streaky = {lbl for lbl, test in streaks.items() if test.streaky}
    result["label_priors"], warm = stopping_priors(cfg, tasks, counts, mixtures, key, streaky)
    if warm is not None:
        result["warm_start"] = warm
    write_json_atomic(paths.need("out"), result)
    return result


def load_priors(path: Path | None) -> PriorSet | None:
    """The priors adaptive-prior wrote (None: no file given): LabelPriors (a PriorSet, with
    the warm start's task keys)."""
    if path is None:
        return None
    data = json.loads(path.read_text())
    keys = (data.get("warm_start") or {}).get("task_keys")
    priors = {lbl: LabelPrior.from_dict(d) for lbl, d in data["label_priors"].items()}
    return PriorSet(priors, keys)


def journal_records(
    tasks: pd.DataFrame, journal_dir: Path, gen_key: str, failed_here: set[tuple[int, int]]
) -> Records:
    """The known results of the shard's tasks in the journal: its ok rollouts and those that
    failed in this job (`failed_here`: (task_index, rollout_index)); other failures are left
    to retry."""
    w = _winners(tasks, journal_dir, gen_key)
    ok = (w["status"] == OK).to_numpy()
    ti = w["task_index"].to_numpy(np.int64)
    ri = w["rollout_index"].to_numpy(np.int64)
    failed_keys = np.array([a * MAX_NUM_REPEATS + b for a, b in failed_here], dtype=np.int64)
    here = np.isin(ti * MAX_NUM_REPEATS + ri, failed_keys)
    known = ok | here
    pos = pd.Index(tasks["task_index"]).get_indexer(ti[known])
    reward = np.where(ok[known], w["reward"].to_numpy(dtype=float, na_value=np.nan)[known], np.nan)
    return Records(pos.astype(np.int64), ri[known], reward)


def _plan_inputs(cfg: Config, tasks: pd.DataFrame, priors) -> dict:
    labels = tasks["label"].to_numpy(dtype=object)
    return {
        "num_repeats": tasks["num_repeats"].to_numpy(np.int64),
        "labels": labels,
        "priors": priors,
        "pass_threshold": cfg.profile.pass_threshold,
        "audit": audit_of(tasks["task_id"].to_numpy(dtype=object), labels, priors),
        "prior_keys": prior_keys_of(tasks["task_id"], labels, priors),
    }


def shard_plan(
    cfg: Config,
    settings: AdaptiveSettings,
    tasks: pd.DataFrame,
    journal_dir: Path,
    gen_key: str,
    failed_here: set[tuple[int, int]],
    priors: dict[str, MixturePrior] | None = None,
) -> tuple[Plan, Records]:
    """The round-synchronous plan of the shard's tasks on the journal (journal_records)."""
    records = journal_records(tasks, journal_dir, gen_key, failed_here)
    return plan(settings, cfg.export, records=records, **_plan_inputs(cfg, tasks, priors)), records


def shard_rounds(
    cfg: Config,
    settings: AdaptiveSettings,
    tasks: pd.DataFrame,
    journal_dir: Path,
    gen_key: str,
    priors: dict[str, MixturePrior] | None = None,
) -> TaskRounds:
    """The shard's tasks' rounds, planned task by task, from what the journal holds."""
    records = journal_records(tasks, journal_dir, gen_key, set())
    return TaskRounds(settings, cfg.export, records=records, **_plan_inputs(cfg, tasks, priors))


def checked_plan(run, settings: AdaptiveSettings, rounds: TaskRounds, priors=None) -> Plan:
    """The round-synchronous plan on the journal once the rounds are finished (`run`: the
    shard's ShardRun): it asks for nothing more and is the rounds' plan, task by task; what
    the output's metadata records."""
    plan_, records = shard_plan(
        run.cfg, settings, run.tasks, run.journal_dir, run.gen_key, run.failed_here, priors
    )
    if any(missing_lists(plan_, records)):  # what was sampled did not reach the journal
        raise RuntimeError(f"{run.shard_tag}: planned rollouts missing from the journal")
    mine = rounds.result()
    for field in ("planned", "done", "keep"):
        if not np.array_equal(getattr(plan_, field), getattr(mine, field)):
            raise RuntimeError(f"{run.shard_tag}: the rounds' {field} differ from the plan's")
    return plan_


def missing_lists(plan_: Plan, records: Records) -> list[list[int]]:
    """Per task position, the planned rollout indices still to sample."""
    pos, idx = plan_.missing(records)
    out: list[list[int]] = [[] for _ in range(len(plan_.planned))]
    for p, r in zip(pos.tolist(), idx.tolist(), strict=True):
        out[p].append(r)
    return out


def plan_metadata(tasks: pd.DataFrame, plan_: Plan) -> dict[bytes, bytes]:
    """The plan as Parquet key-value metadata of the shard output (store/plans.py)."""
    return plans.plan_metadata(
        tasks["task_index"].to_numpy(), plan_.planned, plan_.stopped_early, plan_.keep
    )

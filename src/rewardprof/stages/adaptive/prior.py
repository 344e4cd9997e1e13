"""adaptive prior (bayes): every label's prior, fitted on the first round of all shards (the
journaled rollouts below adaptive.min_rollouts), written to the prior file (store/priors.py),
which every later round reads. The prior never depends on the shard layout or on what a
restarted job had journaled: it is a function of the first round's rewards alone.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, NotRequired, TypedDict

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from rewardprof.core.config import Config
from rewardprof.core.kinds import OK
from rewardprof.decisions.audit.sample import audit_shares, with_audit_cutoffs, with_audit_shares
from rewardprof.decisions.planning.round_plan import uses_posterior
from rewardprof.decisions.planning.stop_budget import with_stop_thresholds
from rewardprof.decisions.planning.stop_tests import posterior_fn_for
from rewardprof.decisions.planning.streaks import StreakTest, round_ends, streak_tests
from rewardprof.decisions.priors.label import fit_label_priors
from rewardprof.decisions.priors.posterior import MixturePrior, fit_prior
from rewardprof.decisions.priors.warm_start import (
    PriorSet,
    bayes_warm_labels,
    prior_keys_of,
    warm_priors,
)
from rewardprof.stages import PriorPaths
from rewardprof.stages.adaptive_settings import first_round_settings, settings_of
from rewardprof.store.collected import resolve
from rewardprof.store.earlier_profile import EARLIER_COLUMNS
from rewardprof.store.journal import scan_journal
from rewardprof.store.priors import write_prior_file
from rewardprof.store.seeds import gen_key


def _first_round_ok(cfg: Config, tasks: pd.DataFrame, journal_dir: Path, gen_key: str):
    """The journaled ok rollouts of the first round (index below adaptive.min_rollouts): the
    prior job's one scan of the journal, which the counts and the streak test read."""
    first = np.minimum(cfg.adaptive.min_rollouts, tasks["num_repeats"].to_numpy(np.int64))
    cols = tasks[["task_index", "task_id"]].assign(num_repeats=first)
    w = resolve(scan_journal(journal_dir), cols, gen_key).winners
    return w[w["status"] == OK]


def _first_round_streaks(
    cfg: Config, tasks: pd.DataFrame, w: pd.DataFrame
) -> dict[str, StreakTest]:
    """Per label, whether its first round (`w`: _first_round_ok) shows within-task correlation
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


def _first_round_counts(
    cfg: Config, tasks: pd.DataFrame, w: pd.DataFrame
) -> tuple[np.ndarray, np.ndarray, dict[str, bool]]:
    """Per task (n, c) of the first round (`w`: _first_round_ok): ok rollouts count, failed ones
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


def _stopping_priors(
    cfg: Config,
    tasks: pd.DataFrame,
    counts: tuple[np.ndarray, np.ndarray, dict[str, bool]],
    mixtures: dict[str, MixturePrior],
    gen_key: str,
    streaky: frozenset[str] | set[str] = frozenset(),
) -> tuple[dict[str, dict], dict | None]:
    """Each label's LabelPrior (decisions/priors/label.py) on the first round (`counts`:
    _first_round_counts; `mixtures`: each label's profile-family prior on them; `streaky`
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
        earlier = _earlier_counts(Path(cfg.adaptive.warm_start))
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


def _earlier_counts(path: Path) -> dict[str, tuple[int, int]]:
    """task_id -> (num_rollouts, num_passed) of an earlier profile's tasks with rollouts."""
    prof = pq.read_table(path, columns=list(EARLIER_COLUMNS)).to_pandas()
    prof = prof[prof["num_rollouts"] > 0]
    return {
        str(t): (int(n), int(c))
        for t, n, c in zip(prof["task_id"], prof["num_rollouts"], prof["num_passed"], strict=True)
    }


class PriorReport(TypedDict):
    """The prior file's body (store/priors.py)."""

    min_rollouts: int
    gen_key: str
    labels: dict[str, dict[str, Any]]
    streaks: dict[str, dict[str, Any]]
    label_priors: dict[str, dict[str, Any]]
    warm_start: NotRequired[dict[str, Any]]


def run(cfg: Config, paths: PriorPaths) -> PriorReport:
    """Fit the priors on the journaled first round of every task (paths.tasks: the whole tasks
    table; paths.first_rounds: only what the workflow waits for) and write them to paths.out
    (RunLayout.adaptive_prior), which every later round reads."""
    tasks = pq.read_table(
        paths.tasks, columns=["task_index", "task_id", "label", "num_repeats"]
    ).to_pandas()
    key = gen_key(cfg, cfg.model_name)
    first = _first_round_ok(cfg, tasks, paths.journal, key)
    counts = _first_round_counts(cfg, tasks, first)
    n, c, _ = counts
    labels = tasks["label"].to_numpy(dtype=object)
    # each label's profile-family prior (decisions/priors/posterior.py): recorded, and kept with its
    # LabelPrior for the posterior keep rules
    mixtures = {lbl: fit_prior(n[labels == lbl], c[labels == lbl]) for lbl in pd.unique(labels)}
    streaks = _first_round_streaks(cfg, tasks, first)
    result: PriorReport = {
        "min_rollouts": cfg.adaptive.min_rollouts,
        "gen_key": key,
        "labels": {lbl: m.as_dict() for lbl, m in mixtures.items()},
        "streaks": {str(lbl): test.as_dict() for lbl, test in streaks.items()},
    }
    streaky = {lbl for lbl, test in streaks.items() if test.streaky}
    result["label_priors"], warm = _stopping_priors(cfg, tasks, counts, mixtures, key, streaky)
    if warm is not None:
        result["warm_start"] = warm
    write_prior_file(paths.out, result)
    return result

"""adaptive audit (bayes): how often the run's early decisions differ from the decision at K,
measured on its audit sample (decisions/audit/sample.py), written to adaptive/audit.json.

The prior stopped no audited task: each ran until the keep rules settled it (at num_repeats at
the latest). Replaying the planner on the merged rollouts without the audit gives, for each of
them, what it would have decided and whether the prior would have stopped it (a round only
looks at the rollouts below its size, so the replay sees exactly what an unaudited task would
have seen); the plan with the audit gives the decision at K.
"""

from __future__ import annotations

import logging
from typing import Any, TypedDict

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from rewardprof.core.atomic import write_json_atomic
from rewardprof.core.config import Config
from rewardprof.core.kinds import OK
from rewardprof.decisions.audit.report import audit_report
from rewardprof.decisions.audit.sample import audit_of
from rewardprof.decisions.planning.round_plan import Records, plan
from rewardprof.decisions.priors.warm_start import prior_keys_of
from rewardprof.stages import AuditPaths
from rewardprof.stages.adaptive_settings import load_priors, settings_of


class AuditReport(TypedDict):
    """decisions/audit/sample.py's report and the settings that sized the sample."""

    delta: float
    labels: dict[str, dict[str, Any]]
    overall: dict[str, Any]
    warnings: list[str]
    settings: dict[str, Any]


log = logging.getLogger(__name__)


def audit_run(
    cfg: Config, tasks: pd.DataFrame, rollouts: pd.DataFrame, priors: dict
) -> AuditReport:
    """The audit report of a run (see the module doc)."""
    settings = settings_of(cfg)
    if settings is None or settings.mode != "bayes":
        raise ValueError("adaptive audit: only adaptive.mode bayes has an audit sample")
    pos = pd.Index(tasks["task_index"]).get_indexer(rollouts["task_index"].to_numpy())
    known = pos >= 0
    ok = (rollouts["status"] == OK).to_numpy() & known
    reward = rollouts["reward"].to_numpy(dtype=float, na_value=np.nan)
    records = Records(
        pos[known].astype(np.int64),
        rollouts["rollout_index"].to_numpy(np.int64)[known],
        np.where(ok[known], reward[known], np.nan),
    )
    labels = tasks["label"].to_numpy(dtype=object)
    audited = audit_of(tasks["task_id"].to_numpy(dtype=object), labels, priors)
    if audited is None:
        audited = np.zeros(len(tasks), dtype=bool)
    k = tasks["num_repeats"].to_numpy(np.int64)
    args = (settings, cfg.export, k, labels, records, priors, cfg.profile.pass_threshold)
    keys = prior_keys_of(tasks["task_id"].to_numpy(dtype=object), labels, priors)
    with_audit = plan(*args, audited, prior_keys=keys)
    replayed = plan(*args, prior_keys=keys)
    report = audit_report(
        labels,
        audited & with_audit.done,
        # stopped by the prior: the audit made it go on (a stop by the rules stops it too)
        replayed.stopped_early & (with_audit.planned > replayed.planned),
        replayed.keep,
        with_audit.keep,
        settings.delta,
        extra=np.maximum(with_audit.planned - replayed.planned, 0),
    )
    report["settings"] = {
        "audit_share": cfg.adaptive.audit_share,
        "audit_min_tasks": cfg.adaptive.audit_min_tasks,
    }
    return report


def run(cfg: Config, paths: AuditPaths) -> AuditReport:
    """Audit the merged rollouts (paths.rollouts) of the tasks (paths.tasks) under the priors
    (paths.prior); write paths.out (RunLayout.adaptive_audit), log each warning, return it."""
    tasks = pq.read_table(
        paths.tasks, columns=["task_index", "task_id", "label", "num_repeats"]
    ).to_pandas()
    cols = ["task_index", "rollout_index", "status", "reward"]
    rollouts = pq.read_table(paths.rollouts, columns=cols).to_pandas()
    report = audit_run(cfg, tasks, rollouts, load_priors(paths.prior) or {})
    for line in report["warnings"]:
        log.warning("%s", line)
    write_json_atomic(paths.out, report)
    return report

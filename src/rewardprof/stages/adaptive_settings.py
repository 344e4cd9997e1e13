"""Adaptive sampling as the stages read it, shared by the rounds of the rollout stage
(stages/rollout/) and the adaptive stages (stages/adaptive/): the planner's settings from the
config, and the fitted priors of the prior file (store/priors.py) as decisions' objects."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rewardprof.core.config import Config
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, uses_posterior
from rewardprof.decisions.priors.label import LabelPrior
from rewardprof.decisions.priors.warm_start import PriorSet
from rewardprof.store.priors import read_prior_file


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


def load_priors(path: Path | None) -> PriorSet | None:
    """The priors adaptive-prior wrote (None: no file given): LabelPrior per label or warm
    key (a PriorSet, with the warm start's task keys)."""
    if path is None:
        return None
    data = read_prior_file(path)
    priors = {lbl: LabelPrior.from_dict(d) for lbl, d in data.label_priors.items()}
    return PriorSet(priors, data.task_keys)

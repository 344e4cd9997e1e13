"""Keep rules on real profiles: reward variance, failed rollouts, posterior rules."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from harness.profiles import export_reasons, profile_of

from rewardprof.decisions.keep_rules import OpenTasks, decision_range
from rewardprof.manifest.load import validate_config
from rewardprof.stages.profile_summary import label_summary


def _cfg(export=None, **profile):
    return validate_config(
        {
            "entries": [{"label": "a", "environment": "math", "source": "a", "num_repeats": 8}],
            "profile": {"group_size": 8, **profile},
            "export": export or {},
        }
    )


def _profile(cfg, rewards_per_task: list[list[float | None]]) -> pd.DataFrame:
    """None in a task's list: a failed rollout (engine_error); the task expects 8."""
    return profile_of(cfg, [("a", rewards) for rewards in rewards_per_task], 8)


def _reasons(cfg, prof):
    return export_reasons(cfg, prof)


def test_partial_credit_task_with_reward_variance_is_not_all_fail():
    # rewards {0, 0.5}: pass rate 0 at threshold 1, yet GRPO sees different rewards in a group
    cfg = _cfg()
    prof = _profile(cfg, [[0, 0.5] * 4, [0.0] * 8, [0.5] * 8, [1.0] * 8])
    assert prof.loc[0, "pass_rate"] == 0 and prof.loc[0, "grpo_signal"] > 0.9
    assert _reasons(cfg, prof) == ["kept", "all_fail", "all_fail", "all_pass"]
    report = {"entries": [{"label": "a", "environment": "math", "start": 0, "end": 4}]}
    (a,) = label_summary(prof, report)
    assert (a["share_pass_rate_0"], a["share_all_fail"], a["share_useful"]) == (0.75, 0.5, 0.25)
    # the signal posterior of a partial-credit label is on the reward values, not on passes
    assert prof.loc[0, "post_signal"] > 0.5 and prof.loc[1, "post_signal"] < 0.2


def test_task_that_lost_rollouts_to_failures_is_not_dropped_on_the_survivors():
    # scripted 7 of 8 right; four rollouts failed: 4/4 survivors look all-pass
    lost = [1.0, None, 1.0, None, 1.0, None, 1.0, None]
    settled = [1.0, 0.0, None, 1.0, 1.0, 1.0, 1.0, 1.0]  # a pass and a fail: keep regardless
    fail_with_gap = [0.0] * 7 + [None]
    cfg = _cfg()
    prof = _profile(cfg, [lost, settled, fail_with_gap, [0.0] * 8])
    assert prof.loc[0, "pass_rate"] == 1.0 and prof.loc[0, "num_rollouts"] == 4
    assert _reasons(cfg, prof) == ["kept", "kept", "kept", "all_fail"]
    drop = _cfg({"on_undecided": "drop"})
    assert _reasons(drop, prof) == [
        "undecided_by_failures",
        "kept",
        "undecided_by_failures",
        "all_fail",
    ]


def test_min_rollouts_default_needs_two_scored_rollouts():
    cfg = _cfg()
    assert cfg.export.min_rollouts == 2
    prof = _profile(cfg, [[1.0] + [None] * 7])
    assert _reasons(cfg, prof) == ["no_rollouts"]


def test_posterior_keep_rule_uses_the_signal_probability():
    # a label where most tasks never pass: 0/8 is almost surely p = 0, 1/8 surely is not
    cfg = _cfg({"min_signal_probability": 0.5})
    tasks = [[0.0] * 8] * 30 + [[1.0] + [0.0] * 7] + [[1.0, 0.0] * 4] * 10
    prof = _profile(cfg, tasks)
    got = _reasons(cfg, prof)
    assert got[0] == "all_fail" and got[30] == "kept" and got[-1] == "kept"
    assert prof.loc[0, "post_p_signal"] < 0.05 < 0.5 < prof.loc[30, "post_p_signal"]
    cfg_off = _cfg({"min_signal_probability": 0.5, "drop_all_fail": False})
    assert _reasons(cfg_off, prof)[0] == "low_signal_probability"
    assert (prof["post_ci_low"] <= prof["post_ci_high"]).all()
    # 0/8 in a label of mostly-unsolved tasks: the interval is [0, 0] (the point mass at 0)
    assert prof.loc[0, "post_ci_high"] < prof.loc[30, "post_ci_high"]


@pytest.mark.parametrize("rate_now, var_now", [(0.0, False), (0.5, True)])
def test_decision_range_of_a_partial_credit_task(rate_now, var_now):
    # a task whose rewards are not 0/1: unknown rollouts can add a value (variance) or repeat
    cfg = _cfg()
    cols = {
        "num_rollouts": np.array([4]),
        "pass_rate": np.array([rate_now]),
        "has_variance": np.array([var_now]),
        "grpo_signal": np.array([0.9 if var_now else 0.0]),
    }
    open_tasks = OpenTasks(cols, np.array([0]), np.array([2]), np.array([False]))
    keep, drop = decision_range(cfg.export, open_tasks, 8)
    assert bool(keep[0]) and bool(drop[0]) == (not var_now)

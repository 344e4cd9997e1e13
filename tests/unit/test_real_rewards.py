"""Rewards are real numbers (NeMo Gym's wordle 1.4, multireward 2.0, newton_bench -0.49): the
profile, its signal columns, pass@k and the keep rules take any finite reward."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from harness.profiles import export_reasons, profile_of
from hypothesis import given, settings
from hypothesis import strategies as st

from rewardprof.manifest.load import validate_config


def _cfg(**profile):
    return validate_config(
        {
            "entries": [
                {"label": "bin", "environment": "math", "source": "a", "num_repeats": 4},
                {"label": "game", "environment": "math", "source": "b", "num_repeats": 4},
            ],
            "profile": {"group_size": 4, "pass_at_k": [1, 2], **profile},
        }
    )


def _profile(cfg, per_task: list[tuple[str, list[float | None]]]) -> pd.DataFrame:
    """(label, rewards) per task; None is a failed rollout (engine_error)."""
    return profile_of(cfg, per_task, 4)


def _reasons(cfg, prof):
    return export_reasons(cfg, prof)


def test_rewards_outside_zero_one_are_profiled_and_said_not_binary():
    cfg = _cfg()
    prof = _profile(
        cfg,
        [
            ("bin", [1.0, 0.0, 0.0, 0.0]),
            ("game", [1.4, 1.4, 0.0, 1.4]),  # wordle: solved early scores above 1
            ("game", [-0.49, -0.49, -0.49, -0.49]),  # newton_bench: all equal, negative
            ("game", [2.0, 2.0, 2.0, 2.0]),  # multireward: all equal, above the threshold
        ],
    )
    assert prof["binary_rewards"].tolist() == [True, False, False, False]
    # pass@k is a binary-reward statistic: kept for the 0/1 label, null for the other
    assert prof.loc[0, "pass@2"] == pytest.approx(1 - 3 / 6)
    assert prof.loc[1:, "pass@1"].isna().all() and prof.loc[1:, "pass@2"].isna().all()
    assert prof.loc[1, "min/reward"] == 0.0 and prof.loc[1, "max/reward"] == 1.4
    assert prof.loc[2, "mean/reward"] == pytest.approx(-0.49)
    # signal counts differing rewards: 1.4 vs 0 differ, equal -0.49s or 2.0s never do
    assert prof.loc[1, "grpo_signal"] == pytest.approx(1 - 0.75**4 - 0.25**4)
    assert prof.loc[2, "grpo_signal"] == 0.0 and prof.loc[3, "grpo_signal"] == 0.0
    assert np.isfinite(prof.loc[1:, "post_signal"]).all()
    assert prof.attrs["priors"]["game"]["reward_equals"]["value"] in (1.4, -0.49, 2.0)
    # keep/drop: variance keeps, equal rewards drop (below or above the pass threshold)
    assert _reasons(cfg, prof) == ["kept", "kept", "all_fail", "all_pass"]


def test_a_failed_rollout_of_a_real_valued_task_is_an_unknown_reward_not_an_unknown_pass():
    cfg = validate_config(
        {
            "entries": [{"label": "game", "environment": "math", "source": "b"}],
            "profile": {"group_size": 4},
            "export": {"on_undecided": "drop"},
        }
    )
    # three equal 1.4s and one lost rollout: the lost one could differ, so undecided
    prof = _profile(cfg, [("game", [1.4, 1.4, 1.4, None]), ("game", [1.4, 1.4, 1.4, 1.4])])
    assert prof.loc[0, "num_rollouts"] == 3 and not prof.loc[0, "binary_rewards"]
    assert _reasons(cfg, prof) == ["undecided_by_failures", "all_pass"]


# rewards on a 1e-3 grid: the profile tells rewards apart at 1e-9 (docs/profile.md)
finite = st.integers(-3000, 3000).map(lambda i: i / 1000)


@settings(max_examples=60, deadline=None)
@given(rewards=st.lists(st.lists(finite, min_size=4, max_size=4), min_size=1, max_size=6))
def test_any_finite_rewards_give_finite_columns_and_a_decision(rewards):
    cfg = _cfg()
    prof = _profile(cfg, [("game", r) for r in rewards])
    binary = all(v in (0.0, 1.0) for r in rewards for v in r)
    assert prof["binary_rewards"].tolist() == [binary] * len(rewards)
    assert prof["pass@1"].notna().all() == binary and prof["pass@1"].isna().all() != binary
    for col in ("grpo_signal", "post_signal", "post_p_signal", "mean/reward", "pass_rate"):
        assert np.isfinite(prof[col].to_numpy(dtype=float)).all(), col
    distinct = [len(set(r)) for r in rewards]
    assert prof["num_distinct_rewards"].tolist() == distinct
    assert ((prof["grpo_signal"] > 0) == (np.array(distinct) > 1)).all()
    reasons = _reasons(cfg, prof)
    assert [r == "kept" for r in reasons] == [d > 1 for d in distinct]

"""task_profile and the label summary on a hand-built run (every value computed by hand)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from rewardprof.manifest.load import validate_config
from rewardprof.stages.profile import task_profile
from rewardprof.stages.profile_summary import format_table, label_summary
from rewardprof.store.jsonl import write_table_jsonl


def _cfg(**profile):
    return validate_config(
        {
            "entries": [{"label": "a", "environment": "math", "source": "a"}],
            "profile": {"pass_at_k": [1, 2], "group_size": 2, **profile},
        }
    )


def _tasks(n=3):
    return pd.DataFrame(
        {
            "task_index": range(n),
            "task_id": [f"id{i}" for i in range(n)],
            "label": ["a", "a", "b"][:n],
            "environment": "math",
            "num_repeats": 4,
            "row": [json.dumps({"q": i}) for i in range(n)],
        }
    )


def _rollouts():
    rows = [  # task, rollout, status, reward, finish_reason, tokens
        (0, 0, "ok", 1.0, "stop", 10),
        (0, 1, "ok", 1.0, "stop", 20),
        (0, 2, "ok", 0.0, "stop", 30),
        (0, 3, "ok", 0.0, "length", 100),
        (1, 0, "ok", 1.0, "stop", 5),
        (1, 1, "ok", 1.0, "stop", 5),
        (1, 2, "ok", 1.0, "stop", 5),
        (1, 3, "engine_error", None, None, None),
        (2, 0, "ok", 0.5, "stop", 8),
        (2, 1, "ok", 0.5, "stop", 8),
        (2, 2, "ok", 1.0, "stop", 8),  # task 2's 4th rollout is missing
    ]
    df = pd.DataFrame(
        rows,
        columns=[
            "task_index",
            "rollout_index",
            "status",
            "reward",
            "finish_reason",
            "completion_tokens",
        ],
    )
    df["completion_tokens"] = df["completion_tokens"].astype("Int32")
    return df


def test_task_profile_by_hand():
    prof = task_profile(_cfg(), _tasks(), _rollouts()).set_index("task_index")
    t0, t1, t2 = prof.loc[0], prof.loc[1], prof.loc[2]
    assert (t0["num_rollouts"], t0["num_passed"], t0["pass_rate"]) == (4, 2, 0.5)
    assert t0["pass_rate_excl_truncated"] == pytest.approx(2 / 3)  # [1, 1, 0]
    assert t0["pass@2"] == pytest.approx(1 - 1 / 6)  # 1 - C(2,2)/C(4,2)
    assert t0["grpo_signal"] == pytest.approx(0.5)  # 1 - 0.5^2 - 0.5^2
    assert t0["std/reward"] == 0.5 and t0["median/reward"] == 0.5
    assert t0["num_truncated"] == 1
    assert t0["mean/output_tokens"] == 40 and t0["max/output_tokens"] == 100
    assert t1["num_failed"] == 1 and t1["num_failed/engine_error"] == 1
    assert t1["num_rollouts"] == 3 and t1["pass_rate"] == 1.0 and t1["grpo_signal"] == 0.0
    assert t1["missing_num_rollouts"] == 0 and t1["pass@2"] == 1.0
    # partial credit: rewards .5, .5, 1 with threshold 1 -> 1 pass of 3
    assert t2["pass_rate"] == pytest.approx(1 / 3) and t2["missing_num_rollouts"] == 1
    assert t2["grpo_signal"] == pytest.approx(1 - (2 / 3) ** 2 - (1 / 3) ** 2)
    assert t2["grpo_signal_pass"] == pytest.approx(1 - (1 / 3) ** 2 - (2 / 3) ** 2)
    assert t2["num_distinct_rewards"] == 2
    assert t2["mean/reward"] == pytest.approx(2 / 3)
    # Wilson bounds bracket the rate; 4/4-style ties clip at 1
    assert prof["pass_rate_ci_low"].le(prof["pass_rate"]).all()
    assert t1["pass_rate_ci_high"] == 1.0


def test_threshold_changes_what_passes():
    prof = task_profile(_cfg(pass_threshold=0.5), _tasks(), _rollouts()).set_index("task_index")
    assert prof.loc[2, "pass_rate"] == 1.0
    assert prof.loc[2, "grpo_signal_pass"] == 0.0
    assert prof.loc[2, "grpo_signal"] > 0  # the rewards still differ


def test_task_without_rollouts_has_no_rates():
    prof = task_profile(_cfg(ci_method="beta"), _tasks(), _rollouts()[lambda d: d.task_index < 2])
    t2 = prof.set_index("task_index").loc[2]
    assert t2["num_rollouts"] == 0 and t2["missing_num_rollouts"] == 4
    assert np.isnan(t2["pass_rate"]) and np.isnan(t2["grpo_signal"])
    assert np.isnan(t2["pass_rate_ci_low"]) and np.isnan(t2["pass@1"])


def test_label_summary_splits_by_index_range(tmp_path):
    prof = task_profile(_cfg(), _tasks(), _rollouts())
    report = {
        "entries": [
            {"label": "a", "environment": "math", "start": 0, "end": 2},
            {"label": "b", "environment": "math", "start": 2, "end": 3},
        ]
    }
    a, b = label_summary(prof, report, _rollouts())
    assert (a["tasks"], a["rollouts"], a["expected_rollouts"], a["failed"]) == (2, 7, 8, 1)
    assert a["failed_by_kind"] == {"engine_error": 1}
    assert a["share_pass_rate_1"] == 0.5 and a["share_pass_rate_0"] == 0.0
    assert a["pass_rate_histogram"]["counts"][5] == 1  # 0.5 lands in [0.5, 0.6)
    assert a["pass_rate_histogram"]["counts"][-1] == 1  # 1.0 in the closed last bin
    assert a["output_tokens"]["max"] == 100 and a["output_tokens"]["total"] == 175
    assert a["truncation_rate"] == pytest.approx(1 / 8)
    assert b["missing_rollouts"] == 1 and b["share_useful"] == 1.0
    assert "mean_pass_rate" in format_table([a, b])
    write_table_jsonl(pa.Table.from_pandas(prof), tmp_path / "t.jsonl", raw=("sample",))
    recs = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert recs[0]["sample"] == {"q": 0} and recs[0]["pass@2"] == pytest.approx(5 / 6)
    assert recs[0]["mean/reward"] == 0.5


def _accounting(prof: pd.DataFrame) -> pd.Series:
    return (
        prof["num_rollouts"] + prof["num_failed"] + prof["missing_num_rollouts"]
        == prof["expected_num_rollouts"]
    )


def test_ok_with_null_reward_counts_as_a_verifier_error():
    """An `ok` record with reward null (older runs) was counted in neither
    num_rollouts nor num_failed, so ok + failed + missing != K."""
    rollouts = _rollouts()
    rollouts.loc[(rollouts.task_index == 0) & (rollouts.rollout_index == 2), "reward"] = None
    rollouts.loc[(rollouts.task_index == 1) & (rollouts.rollout_index == 0), "reward"] = np.nan
    prof = task_profile(_cfg(), _tasks(), rollouts)
    assert _accounting(prof).all(), prof[["num_rollouts", "num_failed", "missing_num_rollouts"]]
    t0, t1 = prof.set_index("task_index").loc[0], prof.set_index("task_index").loc[1]
    assert (t0["num_rollouts"], t0["num_failed"], t0["num_failed/verifier_error"]) == (3, 1, 1)
    assert t0["pass_rate"] == pytest.approx(2 / 3)  # the null is not a 0
    assert (t1["num_rollouts"], t1["num_failed"]) == (2, 2)
    assert (t1["num_failed/verifier_error"], t1["num_failed/engine_error"]) == (1, 1)
    report = {"entries": [{"label": "a", "environment": "math", "start": 0, "end": 3}]}
    (a,) = label_summary(prof, report, rollouts)
    assert a["failed_by_kind"] == {"engine_error": 1, "verifier_error": 2}
    assert a["rollouts"] + a["failed"] + a["missing_rollouts"] == a["expected_rollouts"]


def test_ok_with_null_reward_adds_to_existing_verifier_errors():
    rollouts = _rollouts()
    rollouts.loc[
        (rollouts.task_index == 2) & (rollouts.rollout_index == 0), ["status", "reward"]
    ] = ["verifier_error", None]
    rollouts.loc[(rollouts.task_index == 2) & (rollouts.rollout_index == 1), "reward"] = None
    prof = task_profile(_cfg(), _tasks(), rollouts).set_index("task_index")
    assert prof.loc[2, "num_failed/verifier_error"] == 2 and prof.loc[2, "num_rollouts"] == 1
    assert _accounting(prof.reset_index()).all()
    assert prof["num_failed"].sum() == sum(
        prof[c].sum() for c in prof.columns if c.startswith("num_failed/")
    )


def test_rollout_records_ok_without_reward_as_verifier_error():
    """At record creation (rollout runner's verdict step): new runs never store ok + null."""
    import asyncio

    from rewardprof.environments import Verdict, VerifyContext
    from rewardprof.stages.rollout.verifying import verify as _verify

    class NoReward:
        name = "no_reward"

        def __init__(self, reward):
            self.reward = reward

        async def verify(self, row, completion, ctx):
            return Verdict(self.reward, extras={"why": "forgot"})

    for reward in (None, float("nan")):
        v = asyncio.run(_verify(NoReward(reward), {}, "text", VerifyContext()))
        assert (v.status, v.reward) == ("verifier_error", None)
        assert "'no_reward' returned status ok with reward" in v.detail
        assert v.extras == {"why": "forgot"}
    ok = asyncio.run(_verify(NoReward(0.0), {}, "text", VerifyContext()))
    assert (ok.status, ok.reward) == ("ok", 0.0)


def test_small_labels_get_the_pooled_prior_flagged_and_zero_in_their_intervals():
    """The default run's first round (README): math 6 tasks all 0/4, mcq 8 tasks, rg 16."""
    counts = {"math": [0] * 6, "mcq": [0] * 5 + [1] * 2 + [4], "rg": [0] * 13 + [1, 1, 2]}
    labels = [lbl for lbl, cs in counts.items() for _ in cs]
    passes = [c for cs in counts.values() for c in cs]
    tasks = pd.DataFrame(
        {
            "task_index": range(len(labels)),
            "task_id": [f"id{i}" for i in range(len(labels))],
            "label": labels,
            "environment": "math",
            "num_repeats": 4,
            "row": "{}",
        }
    )
    rollouts = pd.DataFrame(
        [(t, r, "ok", float(r < c), "stop", 5) for t, c in enumerate(passes) for r in range(4)],
        columns=["task_index", "rollout_index", "status", "reward", "finish_reason"]
        + ["completion_tokens"],
    )
    prof = task_profile(_cfg(), tasks, rollouts)
    for lbl in ("math", "mcq"):
        rows = prof[(prof["label"] == lbl) & (prof["num_passed"] == 0)]
        assert (rows["prior_source"] == "pooled").all()
        assert (rows["post_ci_low"] == 0.0).all()  # a 0/4 task may never pass
        assert prof.attrs["priors"][lbl]["source"] == "pooled"
        assert prof.attrs["priors"][lbl]["label_tasks"] < prof.attrs["priors"][lbl]["min_tasks"]
        # intervals widened, but a label this small is flagged: coverage not vouched for
        assert (rows["interval_coverage"] == "may_undercover").all()
        assert prof.attrs["priors"][lbl]["interval_coverage"] == "may_undercover"

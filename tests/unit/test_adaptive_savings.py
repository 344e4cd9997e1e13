"""What adaptive sampling saved, in words and in the report's label table: rollouts sent vs
fixed K, tasks stopped early per label, the audit's agreement when the run has one."""

from __future__ import annotations

import json

import pandas as pd

from rewardprof.stages.adaptive.savings import savings
from rewardprof.stages.report import _label_table
from rewardprof.stages.run_summary import savings_lines


def _run(tmp_path, audit: dict | None = None):
    tasks = pd.DataFrame({"label": ["a", "a", "b", "b"], "num_repeats": [8, 8, 8, 8]})
    prof = pd.DataFrame(
        {"expected_num_rollouts": [4, 8, 4, 4], "stopped_early": [True, False, True, True]}
    )
    path = tmp_path / "adaptive" / "audit.json"
    if audit is not None:
        path.parent.mkdir()
        path.write_text(json.dumps(audit))
    return savings(tasks, prof, ["a", "b"], path)


def test_savings_per_label_and_overall(tmp_path):
    saved = _run(tmp_path)
    assert (saved["rollouts_sent"], saved["rollouts_at_fixed_k"]) == (20, 32)
    assert saved["labels"]["a"] == {
        "rollouts_sent": 12,
        "rollouts_at_fixed_k": 16,
        "tasks": 2,
        "tasks_stopped_early": 1,
    }
    lines = savings_lines(saved)
    assert (
        lines[0]
        == "adaptive: 20 rollouts sent of 32 at fixed K (37.5 % saved), 3 tasks stopped early"
    )
    assert "adaptive: b: 8 of 16 rollouts, 2 of 2 tasks stopped early" in lines
    assert not any("audit" in line for line in lines)  # no audit in this run: none claimed


def test_the_audit_agreement_and_cost_are_said_when_the_run_has_one(tmp_path):
    overall = {"audited_tasks": 30, "would_stop_early": 20, "flipped": 1, "extra_rollouts": 5}
    overall["flip_rate_interval"] = [0.001, 0.25]
    settings = {"audit_share": 0.03, "audit_min_tasks": 30}
    labels = {"a": {"audited_tasks": 1}}
    saved = _run(tmp_path, {"overall": overall, "labels": labels, "settings": settings})
    assert saved["audit"]["agreed"] == 19
    lines = savings_lines(saved)
    assert (
        "adaptive: a: 12 of 16 rollouts, 1 of 2 tasks stopped early, 1 audited (never stopped "
        "by the prior)" in lines
    )
    assert lines[-2] == (
        "adaptive: audit: 30 tasks never stopped by the prior, to check its stops "
        "(adaptive.audit_share 0.03, at least adaptive.audit_min_tasks 30 per label), costing "
        "5 rollouts (25.0 % of those sent) beyond what stopping early needed"
    )
    assert lines[-1].startswith(
        "adaptive: audit: the prior would have stopped 20 of the 30; 19 of those decided as "
        "fixed K does (share of tasks decided otherwise: 95 % interval [0.001, 0.25])"
    )


def test_an_audit_that_measured_nothing_says_so_and_which_setting_saves_it(tmp_path):
    """The newcomer's case: a 32-task label audited whole, none of it stopping early (it used
    to print '0 of 0 audited tasks stopped early agree')."""
    overall = {"audited_tasks": 32, "would_stop_early": 0, "flipped": 0, "extra_rollouts": 64}
    saved = _run(tmp_path, {"overall": overall, "labels": {}})
    lines = savings_lines(saved)
    assert "costing 64 rollouts (320.0 % of those sent)" in lines[-2]
    assert "the prior would have stopped none of the 32" in lines[-1]
    assert "adaptive.audit_min_tasks" in lines[-1]


def test_fixed_k_run_says_nothing_and_the_report_table_gains_columns_when_adaptive(tmp_path):
    fixed = pd.DataFrame({"expected_num_rollouts": [8]})
    assert (
        savings(pd.DataFrame({"label": ["a"], "num_repeats": [8]}), fixed, ["a"], tmp_path) is None
    )
    labels = [{"label": "a", "tasks": 2}, {"label": "b", "tasks": 2}]
    cols, rows = _label_table({"labels": labels, "adaptive": _run(tmp_path)})
    assert cols[-3:] == ["rollouts_sent", "rollouts_at_fixed_k", "tasks_stopped_early"]
    assert rows[1]["rollouts_sent"] == 8 and rows[1]["tasks_stopped_early"] == 2
    assert _label_table({"labels": labels})[0][-1] == "truncation_rate"


def test_a_label_whose_audit_is_too_small_is_said_so(tmp_path):
    overall = {"audited_tasks": 3, "would_stop_early": 2, "flipped": 0, "extra_rollouts": 10}
    small = {"audited_tasks": 2, "would_stop_early": 2, "flipped": 0, "too_few_to_say": True}
    small |= {"flip_rate_interval": [0.0, 0.842], "detectable_flip_rate": 0.776}
    saved = _run(tmp_path, {"overall": overall, "labels": {"a": small}})
    assert savings_lines(saved)[-1] == (
        "adaptive: audit of label a: 2 tasks, 2 of them stopped by the prior, flip-rate interval "
        "[0.0, 0.842]: too few to say (it would catch a flip rate of 0.78 or more, not delta's)"
    )

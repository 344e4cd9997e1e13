"""The end-of-run summary (tools/run_summary.py): read from a run's profile and export."""

from __future__ import annotations

import json
import os

from rewardprof.store.layout import RunLayout
from rewardprof.tools.run_summary import summary_lines


def _run(tmp_path, with_export: bool = True):
    layout = RunLayout(tmp_path / "results" / "r")
    layout.profile_summary.parent.mkdir(parents=True)
    label = {"label": "a", "tasks": 3, "rollouts": 12, "failed": 1}
    label |= {"mean_pass_rate": 0.25, "mean_grpo_signal": 0.4}
    overall = {"tasks": 3, "rollouts": 12, "failed": 1, "truncated": 2}
    layout.profile_summary.write_text(
        json.dumps({"run": "r", "labels": [label], "overall": overall})
    )
    if with_export:
        layout.export_report.parent.mkdir(parents=True)
        by = {"all_fail": 1, "all_pass": 0, "no_rollouts": 1}
        exp = {"label": "a", "kept": 1, "dropped": 2, "dropped_by": by}
        layout.export_report.write_text(
            json.dumps({"tasks": 3, "kept": 1, "dropped": 2, "labels": [exp]})
        )
    return layout


def test_the_summary_says_kept_dropped_failures_and_where_the_files_are(tmp_path):
    layout = _run(tmp_path)
    lines = summary_lines(layout.root)
    assert lines[0] == "rewardprof: run r: 3 tasks, 12 rollouts (1 failed, 2 truncated)"
    header = lines[1].split()
    row = dict(zip(header, lines[3].split(), strict=True))
    assert row == {
        "label": "a",
        "tasks": "3",
        "rollouts": "12",
        "failed": "1",
        "mean_pass_rate": "0.250",
        "mean_grpo_signal": "0.400",
        "kept": "1",
        "dropped_no_signal": "1",
        "dropped_other": "1",
    }
    assert any(line.startswith("kept for training: 1 of 3 tasks") for line in lines)
    assert str(layout.export_combined) in "\n".join(lines) and len(lines) <= 24


def test_no_profile_or_an_older_one_says_nothing(tmp_path):
    assert summary_lines(tmp_path / "results" / "none") == []
    layout = _run(tmp_path, with_export=False)
    os.utime(layout.profile_summary, (1000.0, 1000.0))
    assert summary_lines(layout.root, since=2000.0) == []
    lines = summary_lines(layout.root, since=500.0)
    assert lines and not any("kept for training" in line for line in lines)

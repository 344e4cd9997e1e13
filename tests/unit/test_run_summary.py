"""The end-of-run summary (stages/run_summary.py): read from a run's profile and export."""

from __future__ import annotations

import json
import os

from rewardprof.stages.run_summary import front_page, summary_lines
from rewardprof.store.layout import RunLayout


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
        "pass_rate": "0.250",
        "grpo_signal": "0.400",
        "kept": "1",
        "no_signal": "1",
        "other_drop": "1",
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


def test_the_report_front_page_renders_with_the_table_and_the_plots_inline(tmp_path):
    from docutils.core import publish_parts  # lazy: Snakemake's report renders it so

    layout = _run(tmp_path)
    png = tmp_path / "plot.png"
    png.write_bytes(b"\x89PNG" + bytes(range(256)) * 200)  # long: its base64 must wrap
    page = front_page(layout.root, [(png, "A plot"), (tmp_path / "missing.png", "None")])
    assert max(len(line) for line in page.splitlines()) < 10_000
    html = publish_parts(page, writer="html")["html_body"]
    assert "System Message" not in html and "<table" in html
    assert html.count("data:image/png;base64,") == 1 and "A plot" in html
    assert "kept for training: 1 of 3 tasks" in html

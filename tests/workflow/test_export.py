"""L3 (local): one scripted run through export and report; then `rewardprof check` on it and on
copies corrupted in each way it must catch, and `rewardprof estimate` on it as a pilot.

One Snakemake run (module fixture) serves every test here: workflow runs are the expensive part.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import endpoint_config, math_row, snakemake, write_config, write_jsonl

from rewardprof.testing.fake_server import FakeOpenAI
from rewardprof.tools.check import check_run

pytestmark = pytest.mark.workflow

# prompt -> behaviour. "half": right on even seeds; n=4 samples use seeds s..s+3, so exactly 2
# of 4 pass (p = 0.5). "long": a correct answer after 40 words, cut by max_tokens (truncated).
A = {
    "2 + 3": ("5", "right"),
    "7 * 6": ("42", "wrong"),
    "9 - 4": ("5", "half"),
    "4 + 4": ("8", "error"),
}
B = {
    "5 + 5": ("10", "half"),
    "6 + 6": ("12", "half"),
    "1 + 1": ("2", "right"),
    "3 * 3": ("9", "long"),
}


def _answer(prompt: str, seed: int | None) -> str:
    for q, (ans, how) in {**A, **B}.items():
        if q in prompt:
            if how == "right" or (how == "half" and seed is not None and seed % 2 == 0):
                return f"It is \\boxed{{{ans}}}."
            if how == "long":
                return "let me think " * 14 + f"\\boxed{{{ans}}}"
            return "It is \\boxed{0}."
    return "no idea"


def _fault(body: dict) -> str | None:
    text = json.dumps(body.get("messages"))
    return "500" if "4 + 4" in text else None


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("export")
    write_jsonl(root / "data/a.jsonl", [math_row(f"What is {q}?", a) for q, (a, _) in A.items()])
    write_jsonl(root / "data/b.jsonl", [math_row(f"What is {q}?", a) for q, (a, _) in B.items()])
    entries = [
        {"label": "a", "environment": "math", "source": "data/a.jsonl", "num_repeats": 4},
        {"label": "b", "environment": "math", "source": "data/b.jsonl", "num_repeats": 4},
    ]
    with FakeOpenAI(_answer, fault_fn=_fault) as server:
        cfg = endpoint_config(
            server.base_url,
            entries,
            sampling={"max_tokens": 20},
            rollout={"max_attempts": 1, "max_failed_fraction": 1.0},
            profile={"pass_at_k": [1, 2], "group_size": 8},
            export={"min_grpo_signal": 0.5, "target_share": {"a": 0.5, "b": 0.5}},
        )
        path = write_config(root, cfg)
        r = snakemake(root, "--configfile", str(path))
        assert r.returncode == 0, r.stderr[-4000:]
        rep = snakemake(root, "--report", str(root / "report.html"), "--configfile", str(path))
        assert rep.returncode == 0, rep.stderr[-4000:]
    return root, r


def _questions(lines: list[dict]) -> list[str]:
    out = []
    for row in lines:
        text = row["responses_create_params"]["input"][0]["content"]
        out.append(re.search(r"What is (.*)\?", text).group(1))
    return out


def test_export_keeps_tasks_with_signal_and_reweights(run):
    root, _ = run
    ex = root / "results/t/export"
    report = json.loads((ex / "report.json").read_text())
    a, b = report["labels"]
    assert (a["tasks"], a["kept"], a["dropped"]) == (4, 1, 3)
    assert a["dropped_by"] == {
        "no_rollouts": 1,
        "undecided_by_failures": 0,
        "all_fail": 1,
        "all_pass": 1,
        "below_min_pass_rate": 0,
        "above_max_pass_rate": 0,
        "low_grpo_signal": 0,
        "low_expected_signal": 0,
        "low_signal_probability": 0,
        "predicted_drop_at_k": 0,
        "zero_target_share": 0,
    }
    # every dropped task by its reason: a's tasks are 0-3 ("4 + 4" failed every rollout)
    assert report["dropped_tasks"]["no_rollouts"] == [3]
    assert report["dropped_tasks"]["all_pass"][0] == 0
    assert (b["tasks"], b["kept"], b["dropped"]) == (4, 2, 2)
    assert b["dropped_by"]["all_pass"] == 1 and b["dropped_by"]["all_fail"] == 1
    # target 50/50 over 3 kept tasks: a's one task weighs 1.5, b's two 0.75 each
    assert a["weight"] == pytest.approx(1.5) and b["weight"] == pytest.approx(0.75)

    rows_a = [json.loads(x) for x in (ex / "by_label/a.jsonl").read_text().splitlines()]
    rows_b = [json.loads(x) for x in (ex / "by_label/b.jsonl").read_text().splitlines()]
    combined = [json.loads(x) for x in (ex / "combined.jsonl").read_text().splitlines()]
    assert _questions(rows_a) == ["9 - 4"]
    assert _questions(rows_b) == ["5 + 5", "6 + 6"]
    assert combined == rows_a + rows_b
    # the source row comes back as it was, with the profile attached under reward_profile
    row = rows_a[0]
    assert row["expected_answer"] == "5"
    assert set(row) == {"responses_create_params", "expected_answer", "reward_profile"}
    rp = row["reward_profile"]
    assert rp["label"] == "a" and rp["pass_rate"] == 0.5 and rp["num_rollouts"] == 4
    assert rp["weight"] == pytest.approx(1.5)
    assert rp["grpo_signal"] == pytest.approx(1 - 2 * 0.5**8)
    assert rp["pass@2"] == pytest.approx(1 - 1 / 6)


def test_target_share_zero_leaves_the_label_out(run, tmp_path):
    """Before the fix, `target_share: {a: 0}` wrote a's rows to combined.jsonl with weight 0; the
    docs say 0 leaves a label out."""
    import yaml

    root, _ = run
    cfg = yaml.safe_load((root / "run.yaml").read_text())
    cfg["export"]["target_share"] = {"a": 0, "b": 1}
    (tmp_path / "zero.yaml").write_text(yaml.safe_dump(cfg))
    out = tmp_path / "export"
    r = _rewardprof(
        "export",
        "--config",
        str(tmp_path / "zero.yaml"),
        "--profile",
        str(root / "results/t/profile/tasks.parquet"),
        "--report",
        str(root / "results/t/materialize/report.json"),
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    combined = [json.loads(x) for x in (out / "combined.jsonl").read_text().splitlines()]
    assert {row["reward_profile"]["label"] for row in combined} == {"b"}
    assert _questions(combined) == ["5 + 5", "6 + 6"]
    # b alone holds all the weight: the weights sum to the rows exported
    assert [row["reward_profile"]["weight"] for row in combined] == [1.0, 1.0]
    assert (out / "by_label/a.jsonl").read_text() == ""
    report = json.loads((out / "report.json").read_text())
    a, b = report["labels"]
    # a's one task with signal is dropped by the share; the other rules still count first
    assert (a["kept"], a["dropped"], a["weight"]) == (0, 4, 0.0)
    assert a["dropped_by"]["zero_target_share"] == 1 and a["dropped_by"]["all_fail"] == 1
    assert (b["kept"], b["weight"], b["kept_share"]) == (2, 1.0, 1.0)
    assert (report["kept"], report["dropped"]) == (2, 6) and report["notes"] == []
    assert (
        "a: kept 0 of 4 (dropped: no_rollouts 1, all_fail 1, all_pass 1, "
        "zero_target_share 1)" in r.stdout
    )


def test_profile_counts_failures_and_truncation(run):
    root, r = run
    prof = pd.read_parquet(root / "results/t/profile/tasks.parquet").set_index("task_index")
    # task 3 ("4 + 4") always got HTTP 500: four engine_error rollouts, no rewards
    assert prof.loc[3, "num_failed/engine_error"] == 4 and prof.loc[3, "num_rollouts"] == 0
    # task 7 ("3 * 3") was cut at max_tokens: truncated, and so never right
    assert prof.loc[7, "num_truncated"] == 4 and prof.loc[7, "pass_rate"] == 0
    assert pd.isna(prof.loc[7, "pass_rate_excl_truncated"])
    summary = json.loads((root / "results/t/profile/summary.json").read_text())
    a, b = summary["labels"]
    assert a["failed_by_kind"] == {"engine_error": 4} and a["failure_rate"] == 0.25
    assert b["truncation_rate"] == 0.25 and b["share_useful"] == 0.5
    assert b["pass_rate_histogram"]["counts"] == [1, 0, 0, 0, 0, 2, 0, 0, 0, 1]
    # the per-environment table is printed at the end of profile
    assert re.search(r"^a\s+math\s+4\s+12\s+4\s+0\s", r.stdout, flags=re.M), r.stdout


def test_report_html_contains_the_plots(run):
    root, _ = run
    html = (root / "report.html").read_text(errors="replace")
    for name in (
        "pass_rate_hist.png",
        "tokens_vs_pass_rate.png",
        "failures.png",
        "episode_steps.png",
        "labels.csv",
        "export.csv",
    ):
        assert name in html, name
    # the figures are embedded as PNG data, not links to files next to the HTML
    assert html.count("iVBORw0KGgo") >= 3
    labels = pd.read_csv(root / "results/t/report/labels.csv")
    assert list(labels["label"]) == ["a", "b"]


# --- rewardprof check ----------------------------------------------------------------------


def _rewardprof(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "rewardprof"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def _snapshot(d: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(d.rglob("*"))}


def test_check_passes_on_the_good_run_and_writes_nothing(run):
    root, _ = run
    d = root / "results/t"
    before = _snapshot(d)
    r = _rewardprof("check", str(d))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok:" in r.stdout and "8 tasks, 32 rollouts, 2 shards" in r.stdout
    assert _snapshot(d) == before


def _edit(path: Path, fn) -> None:
    """Rewrite one Parquet file through fn(DataFrame) -> DataFrame, keeping its schema."""
    t = pq.read_table(path)
    df = fn(t.to_pandas())
    pq.write_table(pa.Table.from_pandas(df, schema=t.schema, preserve_index=False), path)


def _merged_part(d: Path, i: int) -> Path:
    return d / "rollouts.parquet" / f"part-{i}-of-2.parquet"


def _drop_task_from_shard(d):  # shards no longer partition the tasks
    _edit(d / "shards/0-of-2.parquet", lambda df: df[df.task_index != 2])


def _task_in_two_shards(d):
    tasks = pq.read_table(d / "materialize/tasks.parquet").to_pandas()
    _edit(d / "shards/1-of-2.parquet", lambda df: pd.concat([df, tasks[tasks.task_index == 2]]))


def _rollout_in_wrong_shard(d):
    moved = pq.read_table(d / "rollouts/0-of-2.parquet").to_pandas().iloc[:1]
    _edit(d / "rollouts/0-of-2.parquet", lambda df: df.iloc[1:])
    _edit(d / "rollouts/1-of-2.parquet", lambda df: pd.concat([df, moved]))


def _duplicate_rollout(d):
    for path in (d / "rollouts/1-of-2.parquet", _merged_part(d, 1)):
        _edit(path, lambda df: pd.concat([df, df.iloc[:1]]))


def _wrong_task_id(d):
    def bad(df):
        df = df.copy()
        df.loc[df.index[0], "task_id"] = "0" * 32
        return df

    for path in (d / "rollouts/0-of-2.parquet", _merged_part(d, 0)):
        _edit(path, bad)


def _merge_not_union(d):
    _edit(_merged_part(d, 1), lambda df: df.iloc[1:])


def _label_without_rollouts(d):  # label b is tasks [4, 8)
    for path in (
        d / "rollouts/0-of-2.parquet",
        d / "rollouts/1-of-2.parquet",
        _merged_part(d, 0),
        _merged_part(d, 1),
    ):
        _edit(path, lambda df: df[df.task_index < 4])


def _label_incomplete(d):
    for path in (d / "rollouts/0-of-2.parquet", _merged_part(d, 0)):
        _edit(path, lambda df: df[~((df.task_index == 0) & (df.rollout_index == 3))])


CORRUPTIONS = {
    "task_missing_from_shards": (_drop_task_from_shard, r"1 tasks are in no shard"),
    "task_in_two_shards": (_task_in_two_shards, r"1-of-2.parquet: 1 tasks belong to another"),
    "rollout_in_wrong_shard": (
        _rollout_in_wrong_shard,
        r"rollouts/1-of-2.parquet: 1 rollouts belong to another shard",
    ),
    "duplicate_rollout": (_duplicate_rollout, r"1 duplicate \(task_index, rollout_index\)"),
    "task_id_mismatch": (_wrong_task_id, r"1 rollouts carry a task_id that does not match"),
    "merge_not_union": (_merge_not_union, r"rollouts.parquet: not the union of the shard"),
    "label_without_rollouts": (_label_without_rollouts, r"label 'b': no rollouts at all"),
    "label_incomplete": (_label_incomplete, r"label 'a': incomplete, 15 of 16 rollouts"),
}


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_check_names_each_corruption(run, tmp_path, name):
    root, _ = run
    d = tmp_path / "t"
    shutil.copytree(root / "results/t", d)  # copies: the merged parts stop being hard links
    corrupt, expected = CORRUPTIONS[name]
    corrupt(d)
    problems, _ = check_run(d)  # in-process: the CLI's exit code is tested below
    assert any(re.search(expected, p) for p in problems), problems


def test_check_cli_exits_non_zero_with_the_list(run, tmp_path):
    root, _ = run
    d = tmp_path / "t"
    shutil.copytree(root / "results/t", d)
    _rollout_in_wrong_shard(d)
    _label_incomplete(d)
    r = _rewardprof("check", str(d))
    assert r.returncode == 1, r.stdout
    assert re.search(r"problem\(s\):\n  - .*belong to another shard", r.stdout), r.stdout
    assert "label 'a': incomplete" in r.stdout


# --- rewardprof estimate -------------------------------------------------------------------


def test_estimate_from_the_run_as_a_pilot(run, tmp_path):
    import yaml

    root, _ = run
    full = yaml.safe_load((root / "run.yaml").read_text())
    full["num_shards"] = 4
    for e in full["entries"]:
        e["num_repeats"] = 8
    (tmp_path / "full.yaml").write_text(yaml.safe_dump(full))
    r = _rewardprof(
        "estimate",
        str(root / "results/t"),
        "--target-config",
        str(tmp_path / "full.yaml"),
        "--gpus",
        "2",
        "--tasks",
        "a=1000",
        "--base-dir",
        str(root),
        "--out",
        str(tmp_path / "est"),
    )
    assert r.returncode == 0, r.stderr
    res = json.loads((tmp_path / "est/estimate.json").read_text())
    a, b = res["labels"]
    assert (a["tasks"], a["rollouts"]) == (1000, 8000)
    assert (b["tasks"], b["rollouts"]) == (4, 32)  # counted from data/b.jsonl
    assert a["basis"] == b["basis"] == "label"
    assert a["rollouts_per_gpu_hour"] > 0
    assert a["gpu_hours"] == pytest.approx(8000 / a["rollouts_per_gpu_hour"], rel=1e-3)
    # label a's scored tasks: 4/4, 0/4, 2/4 (the fourth failed every rollout): the fitted prior
    # puts a third on each; three tasks leave a wide interval around that
    assert a["useful_fraction"] == pytest.approx((1 - 2 * 0.5**8) / 3, abs=0.05)
    assert a["useful_fraction_low"] < 0.1 and a["useful_fraction_high"] > 0.9
    assert res["pilot"]["rollouts"] == 32 and res["pilot"]["jobs"] == 2
    assert res["total"]["gpu_hours"] == pytest.approx(a["gpu_hours"] + b["gpu_hours"], rel=1e-3)
    assert "| label | basis | tasks |" in r.stdout
    assert (tmp_path / "est/estimate.md").read_text().strip() == r.stdout.strip()


def test_the_report_opens_on_the_runs_summary_and_plots(run):
    """`snakemake --report` opens on the run's result: the global description is the report
    rule's front page (report/summary.rst): the per-label table, what the export kept, the
    plots inline."""
    root, _ = run
    html = (root / "report.html").read_text()
    start = html.index("workflow_desc = ")
    desc = json.loads(html[start + len("workflow_desc = ") :].split("\n", 1)[0].rstrip(";"))
    assert "Reward profile" in desc and "System Message" not in desc
    assert "kept for training: 3 of 8 tasks" in desc
    assert desc.count("data:image/png;base64,") == 3
    assert "<table" in desc and ">a<" in desc and ">b<" in desc

"""RunLayout names the files of results/<run>/ exactly as the rules, check and estimate expect."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardprof.store.layout import RunLayout
from rewardprof.store.shards import parse_shard_name, shard_name


def test_the_paths_of_a_run():
    run = RunLayout.for_run("demo", 2)
    assert run.root == Path("results/demo")
    got = {
        "tasks": run.tasks,
        "materialize_report": run.materialize_report,
        "journal": run.journal,
        "rollouts": run.rollouts,
        "merge_report": run.merge_report,
        "profile_tasks": run.profile_tasks,
        "profile_jsonl": run.profile_jsonl,
        "profile_summary": run.profile_summary,
        "export_combined": run.export_combined,
        "export_report": run.export_report,
    }
    assert {k: str(v) for k, v in got.items()} == {
        "tasks": "results/demo/materialize/tasks.parquet",
        "materialize_report": "results/demo/materialize/report.json",
        "journal": "results/demo/rollouts/journal",
        "rollouts": "results/demo/rollouts.parquet",
        "merge_report": "results/demo/merge_report.json",
        "profile_tasks": "results/demo/profile/tasks.parquet",
        "profile_jsonl": "results/demo/profile/tasks.jsonl",
        "profile_summary": "results/demo/profile/summary.json",
        "export_combined": "results/demo/export/combined.jsonl",
        "export_report": "results/demo/export/report.json",
    }
    assert str(run.profile_by_label("a")) == "results/demo/profile/by_label/a.parquet"
    assert str(run.export_by_label("a")) == "results/demo/export/by_label/a.jsonl"
    assert str(run.report_file("labels")) == "results/demo/report/labels.csv"
    assert str(run.log("merge")) == "results/demo/logs/merge.log"
    assert str(run.benchmark("merge")) == "results/demo/benchmarks/merge.tsv"


def test_shard_files_take_numbers_or_snakemake_wildcards():
    run = RunLayout("results/demo", 2)
    assert [str(p) for p in run.all_shard_rollouts()] == [
        "results/demo/rollouts/0-of-2.parquet",
        "results/demo/rollouts/1-of-2.parquet",
    ]
    assert str(run.shard_tasks(1)) == "results/demo/shards/1-of-2.parquet"
    assert str(run.shard_tasks("{i}", "{n}")) == "results/demo/shards/{i}-of-{n}.parquet"
    assert str(run.shard_rollouts("{i}", "{n}")) == "results/demo/rollouts/{i}-of-{n}.parquet"
    assert str(run.shard_log("engine", "{i}", "{n}")) == "results/demo/logs/engine/{i}-of-{n}.log"
    bench = run.shard_benchmark("rollout", 0, 3)
    assert str(bench) == "results/demo/benchmarks/rollout/0-of-3.tsv"
    assert bench.parent == run.shard_benchmarks_dir("rollout")


def test_without_a_shard_count_the_shard_methods_need_one():
    run = RunLayout("results/demo")
    with pytest.raises(ValueError, match="shard count is not known"):
        run.shard_tasks(0)
    assert str(run.shard_tasks(0, 4)) == "results/demo/shards/0-of-4.parquet"


def test_shard_names_parse_back():
    assert parse_shard_name(shard_name(3, 8)) == (3, 8)
    assert parse_shard_name("3-of-8.tsv", "tsv") == (3, 8)
    assert parse_shard_name("3-of-8.tsv") is None  # another suffix
    assert parse_shard_name(".3-of-8.parquet.tmp-host-12") is None  # an atomic write's temp
    assert parse_shard_name("journal") is None


def test_the_engine_finds_the_checkouts_venv_from_another_directory(tmp_path, monkeypatch):
    """serve mode falls back to <checkout>/.venv-engine when the working directory has none:
    REPO_ROOT must be the checkout (it was src/ for a while after the package moved)."""
    from rewardprof.engine import model  # lazy: only this test needs it

    assert (model.REPO_ROOT / "pyproject.toml").is_file()
    fake = tmp_path / "checkout"
    (fake / ".venv-engine" / "bin").mkdir(parents=True)
    (fake / ".venv-engine" / "bin" / "python").write_text("")
    monkeypatch.setattr(model, "REPO_ROOT", fake)
    monkeypatch.delenv(model.ENGINE_PYTHON_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert model.engine_python() == str(fake / ".venv-engine" / "bin" / "python")

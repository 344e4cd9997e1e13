"""The run directory, results/<run>/: the one place that names its files.

The rules (rules/common.smk builds `LAYOUT`), `rewardprof check` and `rewardprof estimate` all
take their paths from RunLayout, so a file moves in one place. Shard files are named
`<i>-of-<n>.<suffix>`; the shard methods accept Snakemake wildcards too
(`layout.shard_tasks("{i}", "{n}")` -> `.../shards/{i}-of-{n}.parquet`).

    materialize/tasks.parquet, materialize/report.json   the tasks table and its index ranges
    shards/<i>-of-<n>.parquet                            shard i's tasks
    rollouts/<i>-of-<n>.parquet, rollouts/journal/       shard outputs; the journal of them all
    rollouts/status/<i>-of-<n>.json                      each rollout job's heartbeat
    rollouts.parquet/, merge_report.json                 the merged dataset
    adaptive/first_round/<i>-of-<n>.json, adaptive/prior.json   bayes adaptive sampling
    adaptive/audit.json                                   bayes: the audit sample's agreement
    adaptive/savings.json                                 adaptive: what it saved (profile's)
    profile/, export/, report/                           the profile, the export, the report
    config/<name>.json                                   the config each stage read; full.json
    logs/, benchmarks/                                   one log / timing per job
"""

from __future__ import annotations

from pathlib import Path

from rewardprof.store.shards import shard_name

RESULTS = Path("results")

# report/: the report stage's figures and tables (docs/profile.md, "Report")
REPORT_FILES = {
    "hist": "pass_rate_hist.png",
    "tokens": "tokens_vs_pass_rate.png",
    "failures": "failures.png",
    "steps": "episode_steps.png",
    "labels": "labels.csv",
    "export": "export.csv",
    "front_page": "summary.rst",  # the report's front page (stages/run_summary.py)
}


class ProfileFiles:
    """profile/: the per-task table (Parquet and JSONL), the summary, one table per label."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.tasks = self.dir / "tasks.parquet"
        self.jsonl = self.dir / "tasks.jsonl"
        self.summary = self.dir / "summary.json"

    def by_label(self, label: str) -> Path:
        return self.dir / "by_label" / f"{label}.parquet"


class ExportFiles:
    """export/: the kept rows combined and per label, the kept/dropped report."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.combined = self.dir / "combined.jsonl"
        self.report = self.dir / "report.json"

    def by_label(self, label: str) -> Path:
        return self.dir / "by_label" / f"{label}.jsonl"


class RunLayout:
    """Every path of one run directory: fixed files as attributes, per-shard, per-label and
    per-job files from methods. `num_shards` is the default `n` of the shard methods."""

    def __init__(self, root: str | Path, num_shards: int | None = None):
        self.root = root = Path(root)
        self.num_shards = num_shards
        # materialize: the tasks table and its per-entry [start, end) index ranges
        self.tasks = root / "materialize" / "tasks.parquet"
        self.materialize_report = root / "materialize" / "report.json"
        # shard and rollout: shards/<i>-of-<n>.parquet in, rollouts/<i>-of-<n>.parquet out
        self.shards_dir = root / "shards"
        self.rollouts_dir = root / "rollouts"
        # shared by all shards and all shard counts; not a declared output (rules/rollout.smk)
        self.journal = self.rollouts_dir / "journal"
        # merge: the merged dataset (a directory of Parquet files) and its report
        self.rollouts = root / "rollouts.parquet"
        self.merge_report = root / "merge_report.json"
        self.profile = ProfileFiles(root / "profile")
        self.profile_dir = self.profile.dir
        self.profile_tasks = self.profile.tasks
        self.profile_jsonl = self.profile.jsonl
        self.profile_summary = self.profile.summary
        self.export = ExportFiles(root / "export")
        self.export_dir = self.export.dir
        self.export_combined = self.export.combined
        self.export_report = self.export.report
        self.report_dir = root / "report"
        # the config sections each stage reads, and the whole config (manifest/run_config.py)
        self.config_dir = root / "config"
        # adaptive sampling (bayes): each shard's first round, then the priors fitted on all
        self.adaptive_dir = root / "adaptive"
        self.adaptive_prior = self.adaptive_dir / "prior.json"
        # bayes' audit sample: early decisions replayed against the decisions at K
        self.adaptive_audit = self.adaptive_dir / "audit.json"
        # what adaptive sampling saved (sent vs fixed K, the audit's agreement): the profile's
        self.adaptive_savings = self.adaptive_dir / "savings.json"

    @classmethod
    def for_run(cls, run: str, num_shards: int | None = None) -> RunLayout:
        return cls(RESULTS / run, num_shards)

    def __repr__(self) -> str:
        return f"RunLayout({str(self.root)!r}, num_shards={self.num_shards})"

    def _n(self, n: int | str | None) -> int | str:
        if n is None:
            n = self.num_shards
        if n is None:
            raise ValueError(f"{self!r}: the shard count is not known; pass n")
        return n

    def shard_tasks(self, i: int | str, n: int | str | None = None) -> Path:
        return self.shards_dir / shard_name(i, self._n(n))

    def shard_rollouts(self, i: int | str, n: int | str | None = None) -> Path:
        return self.rollouts_dir / shard_name(i, self._n(n))

    def shard_status(self, i: int | str, n: int | str | None = None) -> Path:
        """The heartbeat the rollout job of shard i writes (`rewardprof status` reads it)."""
        return self.rollouts_dir / "status" / shard_name(i, self._n(n), "json")

    def all_shard_rollouts(self, n: int | None = None) -> list[Path]:
        n = int(self._n(n))
        return [self.shard_rollouts(i, n) for i in range(n)]

    def profile_by_label(self, label: str) -> Path:
        return self.profile.by_label(label)

    def first_round(self, i: int | str, n: int | str | None = None) -> Path:
        """adaptive/first_round/<i>-of-<n>.json: shard i's first round is journaled."""
        return self.adaptive_dir / "first_round" / shard_name(i, self._n(n), "json")

    def export_by_label(self, label: str) -> Path:
        return self.export.by_label(label)

    def report_file(self, key: str) -> Path:
        """One of REPORT_FILES by its key, e.g. report_file("labels") -> report/labels.csv."""
        return self.report_dir / REPORT_FILES[key]

    def stage_config(self, name: str) -> Path:
        """config/<name>.json: the config sections stage `name` reads ("full": all)."""
        return self.config_dir / f"{name}.json"

    # ---- one log and one benchmark per job -----------------------------------------------
    def log(self, stage: str) -> Path:
        return self.root / "logs" / f"{stage}.log"

    def shard_log(self, kind: str, i: int | str, n: int | str | None = None) -> Path:
        """logs/<kind>/<i>-of-<n>.log; kind is shard, rollout or engine."""
        return self.root / "logs" / kind / shard_name(i, self._n(n), "log")

    def benchmark(self, stage: str) -> Path:
        return self.root / "benchmarks" / f"{stage}.tsv"

    def shard_benchmarks_dir(self, stage: str) -> Path:
        return self.root / "benchmarks" / stage

    def shard_benchmark(self, stage: str, i: int | str, n: int | str | None = None) -> Path:
        return self.shard_benchmarks_dir(stage) / shard_name(i, self._n(n), "tsv")

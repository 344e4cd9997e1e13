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

import json
from pathlib import Path

from rewardprof.store.shards import parse_shard_name, shard_name

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
        return self.every_shard("shard_rollouts", n)

    def every_shard(self, method: str, n: int | None = None) -> list[Path]:
        """Every shard's file, shard 0 first: the per-shard `method` (shard_rollouts,
        first_round, ...) called with each (i, n)."""
        n = int(self._n(n))
        return [getattr(self, method)(i, n) for i in range(n)]

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


def current_num_shards(layout: RunLayout) -> int | None:
    """The shard count the run directory is at: the layout written last (None when no file
    names one). Every file that names a layout counts, at its modification time: the rollout
    jobs' heartbeats, the shard files, the shard outputs, and the merge report (the layout of
    the shards it merged, when they are of one).

    Written last, not the merge report's first, because a reshard (or a rerun at another N)
    writes its shard files and heartbeats while an older layout's files and merge report are
    still there: `rewardprof status` must show the layout under way, and `rewardprof check`
    checks the layout the directory is being built at. Once merged, the merge report is the
    newest file and names the merged layout; with files of one layout, it is that one whatever
    the times. `rewardprof check` used to prefer the merge report and to refuse several layouts
    without one; `rewardprof status` did not count the outputs or the merge report."""
    written: dict[int, float] = {}  # shard count -> its newest file's mtime
    for directory, suffix in (
        (layout.shard_status(0, 1).parent, "json"),
        (layout.shards_dir, "parquet"),
        (layout.rollouts_dir, "parquet"),
    ):
        if directory.is_dir():
            for p in directory.iterdir():
                if parsed := parse_shard_name(p.name, suffix):
                    written[parsed[1]] = max(written.get(parsed[1], 0.0), p.stat().st_mtime)
    if layout.merge_report.exists():
        merged = json.loads(layout.merge_report.read_text()).get("shards") or []
        ns = {parsed[1] for s in merged if (parsed := parse_shard_name(Path(s).name))}
        if len(ns) == 1:
            n = ns.pop()
            written[n] = max(written.get(n, 0.0), layout.merge_report.stat().st_mtime)
    return max(written, key=written.__getitem__) if written else None


class FleetLayout:
    """fleet/ of a run directory: the files of its shared engine fleet. `rewardprof fleet`
    (tools/fleet.py) builds it and hands it to the fleet it serves (engine/fleet.py takes it as
    its `FleetFiles`: the engine names no file of a run directory)."""

    def __init__(self, run: RunLayout):
        self.dir = directory = run.root / "fleet"
        # the published replicas, {"endpoints": [...]}: rollout jobs' engine.endpoints_file
        self.endpoints = directory / "endpoints.json"
        self.state = directory / "fleet.json"  # how it was started: pid or Slurm job id
        self.stop = directory / "stop"  # every fleet process stops when it sees it
        self.replicas = directory / "replicas"
        self.log = directory / "fleet.log"  # launcher local: the fleet process's output
        self.sbatch_script = directory / "fleet.sbatch"  # launcher slurm: the fleet's job

    def replica(self, i: int) -> Path:
        """replicas/<i>.json: replica i's URL and state, written by its keeper."""
        return self.replicas / f"{i}.json"

    def replica_log(self, i: int | str) -> Path:
        """replica-<i>.log: replica i's server log (i="*": the pattern of them all)."""
        return self.dir / f"replica-{i}.log"

    def slurm_log(self, job: str) -> Path:
        """slurm-<job>.log: the fleet job's log (job="%j": sbatch's pattern for it)."""
        return self.dir / f"slurm-{job}.log"


class GrpoStepLayout:
    """What `rewardprof grpo-step RUN_DIR` writes into a run directory (train/step.py,
    train/refit.py, docs/training.md)."""

    def __init__(self, run: RunLayout):
        self.result = run.root / "grpo_step.json"  # the step's numbers
        self.dir = run.root / "grpo_step"
        self.model = self.dir / "model"  # --serve: the stepped weights the engine refits on
        self.refit_config = self.dir / "refit.yaml"  # the run's config on the stepped policy
        self.engine_logs = run.log("grpo_step").with_suffix("")  # logs/grpo_step/

    def engine_log(self, weights: str) -> Path:
        """logs/grpo_step/engine-<weights>.log: the engine serving the weights before or after
        the step."""
        return self.engine_logs / f"engine-{weights}.log"

"""The run manifest: one pydantic model is the single source of truth for every config key.

The Snakefile validates Snakemake's merged `config` dict through `validate_config`
(manifest/load.py) before it builds the DAG, and every `rewardprof <stage>` command
re-validates what it is given, so a bad key fails with one line naming it, whichever door it
came through. Each entry's `options` are checked there too, against its environment's
`Options` model (rewardprof.environments.options).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from rewardprof.core.config_engine import Engine, Fleet
from rewardprof.core.config_types import RetryOptions, StrictModel
from rewardprof.core.errors import ConfigError  # noqa: F401 (re-export: raised by every config check)
from rewardprof.core.limits import MAX_NAME_LENGTH, small_structure

# A label or run name names files and directories (profile/by_label/<label>.parquet): letters,
# digits, _ . - and at most MAX_NAME_LENGTH of them.
LABEL_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
Name = Annotated[str, Field(pattern=LABEL_PATTERN, max_length=MAX_NAME_LENGTH)]
# Rollout r of a task samples with seed task_seed + r, and task_seed leaves its low 12 bits to
# r (rewardprof.store.seeds.task_seed): K is at most 2^12.
MAX_NUM_REPEATS = 1 << 12


class GeneratorSource(StrictModel):
    """Tasks generated procedurally instead of read from a file (no dataset download)."""

    generator: Literal["reasoning_gym"]
    """Generator name."""
    task: str
    """Dataset name inside the generator, e.g. 'basic_arithmetic'."""
    size: PositiveInt
    """Number of tasks to generate."""
    seed: int = 0
    """Generator seed; the same seed gives the same tasks."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Extra keyword arguments for the generator."""


class Entry(StrictModel):
    """One environment dataset of the blend; manifest order fixes task_index offsets."""

    label: Name
    """Unique name of this entry (letters, digits, _ . -; at most 64)."""
    environment: str
    """Registry name of the environment (verifier)."""
    source: str | GeneratorSource
    """JSONL or Parquet path, or a generator spec (e.g. reasoning_gym)."""
    num_repeats: PositiveInt = Field(
        4,
        description=f"K: rollouts per task (at most {MAX_NUM_REPEATS}: the rollout index "
        f"takes the low bits of each rollout's seed, docs/robustness.md).",
    )
    limit: PositiveInt | None = None
    """Maximum number of tasks taken from this source."""
    sample: Literal["head", "random"] = "head"
    """head: the first `limit` rows; random: a seeded reservoir sample."""
    seed: int = 0
    """Seed for sample: random."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Options of the entry's environment, checked against its `Options` model (the
    entries[].options sections below; docs/environments.md)."""

    @field_validator("num_repeats")
    @classmethod
    def _repeats_fit_the_seed(cls, v: int) -> int:
        if v > MAX_NUM_REPEATS:
            raise ValueError(
                f"at most {MAX_NUM_REPEATS} rollouts per task (the rollout index "
                f"takes the low 12 bits of each rollout's seed, docs/robustness.md)"
            )
        return v

    @field_validator("options")
    @classmethod
    def _options_stay_small(cls, v: dict[str, Any]) -> dict[str, Any]:
        return small_structure(v)


class Sampling(StrictModel):
    temperature: NonNegativeFloat = 1.0
    """Sampling temperature."""
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    """Nucleus sampling."""
    max_tokens: PositiveInt = 1024
    """Most completion tokens per rollout (beyond: finish_reason length)."""
    seed: int = 0
    """Base seed; each rollout's seed derives from it."""


class Rollout(StrictModel, RetryOptions):
    concurrency: PositiveInt = 64
    """Requests in flight. With several replicas, at least as many as they admit (replicas x
    engine.replica_capacity x engine.replica_admission sequences), so a job fills the fleet."""
    request_timeout_s: PositiveFloat = 600
    """Per-request timeout; past it the attempt fails as a timeout."""
    max_chars_per_token: Annotated[int, Field(ge=1, le=1024)] = 32
    """Most characters a completion may have per token of sampling.max_tokens; a longer one
    (and a reply body larger than such completions need) is an engine_error `reply_too_large`,
    stopped while reading."""
    endpoint_down_s: PositiveFloat = 60.0
    """Stop the rollout job, with the last error on one line, once every request has failed
    with a connection error for this long (the endpoint is gone; a rerun continues)."""
    max_failed_fraction: Annotated[float, Field(ge=0, le=1)] = 0.01
    """Share of a shard's rollouts that may fail terminally and still complete it (failures stay
    visible per task in the profile); over it the job fails and a rerun retries them."""
    verify_workers: PositiveInt = 2
    """Worker processes for CPU-heavy verification."""
    verify_timeout_s: PositiveFloat = 30.0
    """Default hard timeout of one verification (verifier_timeout)."""
    segment_interval_s: PositiveFloat = 30.0
    """How often the journal's JSONL tail is compacted into a Parquet segment."""
    segment_max_records: PositiveInt = 20000
    """Most records in the JSONL tail before it is compacted."""
    progress_interval_s: PositiveFloat = 30.0
    """Seconds between progress lines when not on a terminal."""


class Profile(StrictModel):
    pass_at_k: list[PositiveInt] = Field(default_factory=lambda: [1])
    """k values of the unbiased pass@k estimator."""
    group_size: Annotated[int, Field(gt=1)] = 8
    """GRPO group size G."""
    pass_threshold: float = 1.0
    """A rollout passes when reward >= this."""
    ci_level: Annotated[float, Field(gt=0, lt=1)] = 0.95
    """Confidence level of the pass-rate interval."""
    ci_method: Literal["wilson", "beta"] = "wilson"
    """wilson (score interval) or beta (Clopper-Pearson, exact)."""
    signal_threshold: Annotated[float, Field(ge=0, le=1)] = 0.1
    """s of the posterior column post_p_signal = P(GRPO signal at group_size >= s)."""


class Export(StrictModel):
    """The filtered, re-weighted training set (results/<run>/export/); see docs/profile.md."""

    pass_rate_column: Literal["pass_rate", "pass_rate_excl_truncated"] = "pass_rate"
    """Which pass rate the keep rules below look at."""
    drop_all_fail: bool = True
    """Drop tasks whose rollouts all got the same failing reward (no reward variance: no GRPO
    signal). A partial-credit task with rewards {0, 0.5} is not all-fail."""
    drop_all_pass: bool = True
    """Drop tasks whose rollouts all got the same passing reward (no reward variance)."""
    min_pass_rate: Annotated[float, Field(ge=0, le=1)] | None = None
    """Keep only tasks with pass rate >= this (null: no lower bound)."""
    max_pass_rate: Annotated[float, Field(ge=0, le=1)] | None = None
    """Keep only tasks with pass rate <= this (null: no upper bound)."""
    min_grpo_signal: Annotated[float, Field(ge=0, le=1)] | None = None
    """Keep only tasks whose grpo_signal (at profile.group_size) >= this. That plug-in estimate
    is biased low for few rollouts; min_expected_signal / min_signal_probability are not."""
    min_expected_signal: Annotated[float, Field(ge=0, le=1)] | None = None
    """Keep only tasks whose posterior expected GRPO signal (post_signal) >= this."""
    min_signal_probability: Annotated[float, Field(ge=0, le=1)] | None = None
    """Keep only tasks with posterior P(signal >= profile.signal_threshold) (post_p_signal) >=
    this, e.g. 0.5."""
    min_rollouts: Annotated[int, Field(ge=1)] = 2
    """Drop tasks with fewer scored (ok) rollouts than this (no_rollouts): one rollout cannot
    show reward variance."""
    on_undecided: Literal["keep", "drop"] = "keep"
    """A task whose keep/drop decision would differ under some outcome of its failed or missing
    rollouts (undecided_by_failures): keep it (no rule drops it on the survivors alone) or drop
    it. Either way the export report lists it."""
    target_share: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    """label -> share of the combined export's total weight; every label must be listed (0 leaves
    one out). Empty: every kept task has weight 1."""
    profile_key: str = "reward_profile"
    """Key under which the profile fields are attached to a row."""


class Adaptive(StrictModel):
    """Adaptive sampling (docs/adaptive.md): stop sampling a task once its keep/drop decision at
    num_repeats is settled; num_repeats stays the most a task gets."""

    mode: Literal["off", "exact", "bayes"] = "off"
    """off: every task gets num_repeats; exact: stop when no outcome of the remaining rollouts
    can change the decision; bayes: exact's stops, and from min_rollouts on, stops by the
    label's prior that keep the expected share of decisions differing from fixed K <= delta."""
    min_rollouts: PositiveInt = 4
    """bayes: the first round, exact's rounds until a task is settled or has this many (at most
    num_repeats); the priors are fitted on it and speak from here on (with or without
    warm_start: docs/adaptive.md)."""
    delta: Annotated[float, Field(gt=0, lt=1)] = 0.02
    """bayes: the tolerated share of a label's tasks whose decision differs from fixed K's (1 -
    agreement), spent where stopping saves the most (docs/adaptive.md)."""
    round_size: PositiveInt = 2
    """Rollouts per task per round after the first (exact's first round is this too)."""
    audit_share: Annotated[float, Field(ge=0, le=1)] = 0.03
    """bayes: share of each label's tasks (chosen by a hash of task_id, salted per run) that the
    prior never stops (they run until the keep rules settle them), so the run measures its own
    agreement (adaptive/audit.json)."""
    audit_min_tasks: NonNegativeInt = 0
    """bayes: audit at least this many tasks per label (at most all of them). 0: the share
    alone, a budget not a floor; a label too small for a useful audit is reported as such
    ("too few to say") instead of being audited whole."""
    warm_start: str | None = None
    """bayes: an earlier run's profile/tasks.parquet (e.g. the previous checkpoint's) of the
    same tasks: a task matched by task_id gets a prior from its earlier rewards, trusted as far
    as the first round says the policy did not move (docs/adaptive.md)."""

    @field_validator("mode", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        return "off" if v is False else v  # YAML 1.1 reads a bare `off` as false


class Config(StrictModel):
    run: Name = "demo"
    """Outputs go to results/<run>/ (letters, digits, _ . -; at most 64)."""
    num_shards: PositiveInt = 2
    """Rollout jobs; shard i owns the tasks `store.shards.shard_of` assigns it."""
    entries: list[Entry] = Field(min_length=1)
    """The blend: one per dataset."""
    sampling: Sampling = Field(default_factory=Sampling)
    """See below."""
    engine: Engine = Field(default_factory=Engine)
    """See below."""
    rollout: Rollout = Field(default_factory=Rollout)
    """See below."""
    profile: Profile = Field(default_factory=Profile)
    """See below."""
    export: Export = Field(default_factory=Export)
    """See below."""
    adaptive: Adaptive = Field(default_factory=Adaptive)
    """See below."""
    fleet: Fleet = Field(default_factory=Fleet)
    """See below."""

    @model_validator(mode="after")
    def _cross_checks(self) -> Config:
        seen: set[str] = set()
        for i, e in enumerate(self.entries):
            if e.label in seen:
                raise ValueError(f"entries[{i}].label: duplicate label {e.label!r}")
            seen.add(e.label)
        if self.engine.mode == "endpoint":
            if not self.engine.base_url and not self.engine.endpoints_file:
                raise ValueError(
                    "engine.base_url: required when engine.mode is 'endpoint' (or give "
                    "engine.endpoints_file)"
                )
            if self.engine.base_url and self.engine.endpoints_file:
                raise ValueError("engine.endpoints_file: give it or engine.base_url, not both")
        loopback = self.engine.host in ("localhost", "::1") or self.engine.host.startswith("127.")
        if self.fleet.launcher == "slurm" and loopback:
            raise ValueError(
                f"engine.host: {self.engine.host} with fleet.launcher slurm publishes an address "
                "only the replica's own node reaches; set engine.host: 0.0.0.0 (published with "
                "the node's host name)"
            )
        share = self.export.target_share
        if share:
            unknown = sorted(set(share) - seen)
            if unknown:
                raise ValueError(f"export.target_share: unknown label(s) {', '.join(unknown)}")
            missing = [lbl for lbl in seen if lbl not in share]
            if missing:
                raise ValueError(
                    f"export.target_share: missing label(s) {', '.join(missing)} "
                    f"(give 0 to leave a label out)"
                )
            if sum(share.values()) <= 0:
                raise ValueError("export.target_share: the shares must not all be 0")
        lo, hi = self.export.min_pass_rate, self.export.max_pass_rate
        if lo is not None and hi is not None and lo > hi:
            raise ValueError("export.min_pass_rate: greater than export.max_pass_rate")
        if self.adaptive.warm_start and self.adaptive.mode != "bayes":
            raise ValueError("adaptive.warm_start: needs adaptive.mode bayes")
        posterior_rules = (self.export.min_expected_signal, self.export.min_signal_probability)
        if self.adaptive.mode == "exact" and any(r is not None for r in posterior_rules):
            raise ValueError(
                "adaptive.mode: exact cannot settle the posterior keep rules "
                "(export.min_expected_signal, min_signal_probability)"
            )
        return self

    @property
    def model_name(self) -> str:
        """The model name sent in requests and expected in /v1/models."""
        if self.engine.served_model_name:
            return self.engine.served_model_name
        m = self.engine.model
        return m.split(":", 1)[1] if m.startswith("builtin:") else m


def json_schema() -> dict[str, Any]:
    return Config.model_json_schema()

"""The engine and fleet sections of the run manifest (core/config.py holds the whole model):
how the policy is served, by one server per job, by replicas, or by a shared fleet
(docs/engine.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator

from rewardprof.core.config_types import HttpUrl, OneLine, PlainPath, StrictModel
from rewardprof.core.limits import small_structure


class Engine(StrictModel):
    mode: Literal["serve", "endpoint"] = "serve"
    """serve: start vLLM inside the rollout job; endpoint: use base_url."""
    model: OneLine = "builtin:smollm2-135m"
    """builtin:<name>, or a model path/name for vLLM."""
    base_url: HttpUrl | list[HttpUrl] | None = None
    """Endpoint mode: e.g. http://127.0.0.1:8000/v1, or a list of URLs that all serve the same
    model (replicas: balanced by requests in flight, docs/engine.md). `${NAME}` in it is replaced
    by that environment variable, e.g. a password: https://user:${MY_PASSWORD}@host/v1 (never
    written anywhere). A password written out is refused: Snakemake's report embeds the config
    file."""
    endpoints_file: str | None = None
    """Endpoint mode, instead of base_url: a JSON file `{"endpoints": [URL, ...]}` of replicas
    serving the same model, e.g. results/<run>/fleet/endpoints.json written by `rewardprof fleet`;
    re-read while the job runs (when it changes). The job waits engine.startup_timeout_s for a
    first endpoint."""
    replica_capacity: PositiveInt | None = None
    """A replica's slots (a request for n samples counts n): the server's max_num_seqs. An
    endpoints file's per-replica `capacity` comes first. null: the --max-num-seqs of serve_args,
    else 256 (vLLM's default)."""
    replica_admission: Annotated[float, Field(ge=1)] = 3.0
    """Several replicas: most sequences the jobs on a fleet keep in flight on one replica, in
    multiples of its capacity, split between them (each job's share: / the number of jobs);
    past the capacity only in turns while the replica's queue (its /metrics) has room within
    the capacity. Above 1 because a request for n samples counts n until its
    last sample is out, while the replica refills a slot as soon as its sequence ends: at 1, one
    job of n=8 requests kept 36 % of a replica's slots busy, at 3 98 % (simulated engine)."""
    move_waiting: bool = True
    """Several replicas: when the job has nothing left waiting for a slot (a round's or the
    run's end), a request of it waiting in one replica's queue (its /metrics) is moved to a
    replica with free slots: cancelled there (vLLM aborts it) and sent again, same body and
    seed, so its rollouts are the same and journaled once. Keeps every replica busy until the
    last rollout instead of one working off its queue while the others idle."""
    health_interval_s: PositiveFloat = 2.0
    """Several replicas: seconds between /health probes of each replica (a replica out is taken
    back once it answers)."""
    replica_failures_out: PositiveInt = 3
    """Several replicas: consecutive failed attempts (5xx, timeouts) that take a replica out; a
    connection refused or cut takes it out at once."""
    served_model_name: OneLine | None = None
    """Model name sent in requests (default: derived from `model`)."""
    api_key_env: OneLine | None = None
    """Name of the environment variable that holds the API key."""
    max_n: Annotated[int, Field(ge=1)] = 16
    """Most samples asked for in one request (n); 1 sends one per rollout."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Extra fields merged into every request body (at most 100,000 values, 32 levels)."""
    return_token_ids: bool | None = None
    """Ask for each sample's token ids (`return_token_ids: true`, a vLLM extension) so
    completion_tokens is exact per rollout. null: true in serve mode (always vLLM), false in
    endpoint mode (other providers may reject the field; set true for a vLLM endpoint). Without ids
    a request's usage total is split by text length (completion_tokens_source 'apportioned')."""
    serve_args: list[OneLine] = Field(default_factory=list)
    """Extra command-line arguments for the vLLM server."""
    tool_call_parser: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    """Serve mode: vLLM's tool-call parser for the model (e.g. hermes, llama3_json), started
    with --enable-auto-tool-choice: without it vLLM answers requests that offer tools with
    text only. Required in serve mode when an entry's environment acts (episodes). A builtin
    model is then served with rewardprof's ChatML template that lists the tools (its own knows
    none)."""
    serve_env: dict[OneLine, OneLine] = Field(default_factory=dict)
    """Extra environment variables for the vLLM server."""
    startup_timeout_s: PositiveFloat = 900
    """How long serve mode waits for the server to become ready."""
    python: PlainPath | None = None
    """Serve mode: the Python interpreter that has vLLM (the engine's venv). Default:
    $REWARDPROF_ENGINE_PYTHON, else .venv-engine/bin/python, else this one."""
    host: OneLine = "127.0.0.1"
    """Serve mode: address the server binds to; the client in the same job connects there (127.0.0.1
    keeps it private to the node). A fleet on Slurm needs 0.0.0.0: its replicas are published
    with their node's host name for rollout jobs on other nodes."""
    models_dir: PlainPath = "resources/models"
    """Where builtin models are converted to (<dir>/<name>)."""
    stop_grace_s: PositiveFloat = 20
    """Serve mode: seconds between SIGTERM and SIGKILL when stopping the server."""
    nodes: PositiveInt = 1
    """Serve mode: nodes one vLLM replica spans (a model larger than a node; the tensor and
    pipeline parallel sizes stay in serve_args). Over 1, the rollout job runs in a Slurm
    allocation of nodes x replicas nodes and starts each node's part with srun, through vLLM's
    own multi-node launch (--nnodes/--node-rank/--master-addr, --headless off the head)."""
    replicas: PositiveInt = 1
    """Serve mode: independent vLLM replicas the rollout job starts in its Slurm allocation
    (with nodes 1: one per node, several per node when there are more replicas than nodes),
    balanced by the rollout client."""

    @field_validator("extra_body")
    @classmethod
    def _extra_body_stays_small(cls, v: dict[str, Any]) -> dict[str, Any]:
        return small_structure(v)


class Fleet(StrictModel):
    """A shared engine fleet for a sweep (`rewardprof fleet start|stop|status`, docs/engine.md):
    replicas of `engine`'s serve-mode server, their endpoints published in
    results/<run>/fleet/endpoints.json for rollout jobs in endpoint mode."""

    replicas: PositiveInt = 2
    """vLLM servers the fleet runs (each one `engine.serve_args` shape)."""
    launcher: Literal["local", "slurm"] = "local"
    """local: background processes on this machine; slurm: one long-lived sbatch job."""
    sbatch_args: list[OneLine] = Field(default_factory=list)
    """launcher slurm: extra sbatch arguments (partition, --gres, --time, ...)."""
    restarts: Annotated[int, Field(ge=0)] = 2
    """Times a replica that died is started again before the fleet runs without it."""

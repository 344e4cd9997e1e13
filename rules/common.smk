# Config validation and helpers shared by the rules. The config is validated through
# rewardprof's pydantic model before any rule is defined, so a misspelled key fails here,
# before the DAG is built or any job runs.
import json
import os
import sys

from rewardprof.core.config import ConfigError, validate_config
from rewardprof.core.layout import RunLayout

try:
    CFG = validate_config(config, origin="config")
except ConfigError as exc:
    sys.exit(f"rewardprof: invalid config: {exc}")

# every path of results/<run>/ (rewardprof.core.layout); shard paths keep {i} and {n} as wildcards
LAYOUT = RunLayout.for_run(CFG.run, CFG.num_shards)
LABELS = [e.label for e in CFG.entries]


wildcard_constraints:
    i=r"\d+",
    n=r"\d+",
    label=r"[A-Za-z0-9][A-Za-z0-9_.-]*",


def stage_config(*sections):
    """JSON of the config keys one stage depends on: Snakemake's params trigger reruns only
    when these change (e.g. a new profile.pass_at_k does not regenerate rollouts)."""
    data = CFG.model_dump(mode="json")
    keep = {"run", "entries", *sections}
    return json.dumps({k: v for k, v in data.items() if k in keep}, sort_keys=True)


# adaptive sampling plans rounds with the keep rules: then they are rollout config too (only
# then: with adaptive off, a new export rule must not regenerate rollouts)
ROLLOUT_SECTIONS = (
    ("sampling", "engine", "rollout", "adaptive", "export", "profile")
    if CFG.adaptive.mode != "off"
    else ("sampling", "engine", "rollout")
)


BAYES = CFG.adaptive.mode == "bayes"


def adaptive_prior_input():
    """bayes: the rollout jobs wait for the priors fitted over all shards' first rounds."""
    return [str(LAYOUT.adaptive_prior)] if BAYES else []


def final_outputs():
    return [
        LAYOUT.profile_tasks,
        LAYOUT.profile_jsonl,
        LAYOUT.profile_summary,
        *expand(LAYOUT.profile_by_label("{label}"), label=LABELS),
        # filtered/re-weighted export and the report's plots (rules/export.smk, report.smk)
        LAYOUT.export_combined,
        LAYOUT.report_file("labels"),
    ]


def engine_model_input():
    """The converted model directory when serve mode uses a builtin model, else nothing."""
    from rewardprof.engine.model import builtin_dir, builtin_name

    name = builtin_name(CFG.engine.model) if CFG.engine.mode == "serve" else None
    return [str(builtin_dir(CFG, name))] if name else []


def engine_resources():
    """Serve mode starts one vLLM server per rollout job; `engine_slots` bounds how many
    run at once on one machine (profiles/default sets engine_slots: 1)."""
    return 1 if CFG.engine.mode == "serve" else 0

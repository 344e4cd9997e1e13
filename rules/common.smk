# Config validation and helpers shared by the rules. The config is validated through
# rewardprof's pydantic model before any rule is defined, so a misspelled key fails here,
# before the DAG is built or any job runs.
import os
import sys
from pathlib import Path

from rewardprof.core.config import ConfigError
from rewardprof.core.extras import MissingPackage
from rewardprof.manifest.load import validate_config
from rewardprof.core.overrides import misplaced_target, typed_overrides
from rewardprof.store.layout import RunLayout
from rewardprof.core.redaction import refuse_written_passwords
from rewardprof.manifest.run_config import secret_env

# a target written after --configfile (Snakemake reads it as a config file)
if problem := misplaced_target(workflow.config_settings.configfiles, Path.cwd()):
    sys.exit(f"rewardprof: {problem}")

try:
    # values inside a `--config` section come as text (config_settings.config: the --config
    # values only, not the config files'); the config is strict (no "4" -> 4)
    RAW_CONFIG = typed_overrides(config, dict(workflow.config_settings.config))
    CFG = validate_config(RAW_CONFIG, origin="config")
    # Snakemake copies config files whole into `--report` and keeps --config values in
    # .snakemake/: a URL password must be `${NAME}`
    refuse_written_passwords(RAW_CONFIG, origin="config")
except ConfigError as exc:
    sys.exit(f"rewardprof: invalid config: {exc}")
except MissingPackage as exc:  # an entry needs an extra that is not installed
    sys.exit(f"rewardprof: {exc}")

# every path of results/<run>/ (rewardprof.store.layout); shard paths keep {i} and {n} as wildcards
LAYOUT = RunLayout.for_run(CFG.run, CFG.num_shards)
LABELS = [e.label for e in CFG.entries]
# A URL's user:password never reaches a rule's command, params or the run directory's config
# files (Snakemake prints commands and keeps params in .snakemake/metadata): the files hold it
# masked, and the jobs get the real URLs through their environment (local jobs and Slurm jobs,
# --export=ALL, inherit it; rewardprof.core.redaction)
os.environ.update(secret_env(CFG))


wildcard_constraints:
    i=r"\d+",
    n=r"\d+",
    label=r"[A-Za-z0-9][A-Za-z0-9_.-]*",


BAYES = CFG.adaptive.mode == "bayes"
ADAPTIVE = CFG.adaptive.mode != "off"


def adaptive_prior_input():
    """bayes: the rollout jobs wait for the priors fitted over all shards' first rounds."""
    return [str(LAYOUT.adaptive_prior)] if BAYES else []


def adaptive_savings_input():
    """Adaptive sampling: the profile says what it saved (rules/adaptive.smk)."""
    return [str(LAYOUT.adaptive_savings)] if ADAPTIVE else []


def report_front_page():
    page = Path(LAYOUT.report_file("front_page")).resolve()
    return str(page) if page.is_file() else "report/workflow.rst"


def final_outputs():
    return [
        LAYOUT.profile_tasks,
        LAYOUT.profile_jsonl,
        LAYOUT.profile_summary,
        *expand(LAYOUT.profile_by_label("{label}"), label=LABELS),
        # filtered/re-weighted export and the report's plots (rules/export.smk, report.smk)
        LAYOUT.export_combined,
        LAYOUT.report_file("labels"),
        # the config the run used, for the record
        LAYOUT.stage_config("full"),
        # bayes: the audit sample's measured agreement (rules/adaptive.smk)
        *([LAYOUT.adaptive_audit] if BAYES else []),
    ]


def engine_model_input():
    """The converted model's stamp when serve mode uses a builtin model, else nothing (the
    stamp, not the directory: rules/model.smk)."""
    from rewardprof.engine.model import builtin_name, builtin_stamp

    name = builtin_name(CFG.engine.model) if CFG.engine.mode == "serve" else None
    return [str(builtin_stamp(CFG, name))] if name else []


def engine_resources():
    """Serve mode starts one vLLM server per rollout job; `engine_slots` bounds how many
    run at once on one machine (profiles/default sets engine_slots: 1)."""
    return 1 if CFG.engine.mode == "serve" else 0

# rewardprof: sample a policy K times on every task of many RL environments, verify every
# rollout, and profile the reward distribution per task.
#   materialize -> shard (x N) -> rollout (x N) -> merge -> profile
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


# engine_slots bounds vLLM servers per machine (profiles/default: 1); on a cluster each job has
# its own allocation, so the limit must not serialize Slurm jobs.
resource_scopes:
    engine_slots="local",


# seconds of work each: not worth a cluster job per shard
localrules:
    stage_config,
    shard,
    report,
    adaptive_savings,


include: "rules/common.smk"
include: "rules/config.smk"
include: "rules/checks.smk"
include: "rules/materialize.smk"
include: "rules/shard.smk"
include: "rules/rollout.smk"
include: "rules/adaptive.smk"
include: "rules/model.smk"
include: "rules/merge.smk"
include: "rules/profile.smk"
include: "rules/export.smk"
include: "rules/report.smk"


# `snakemake --report` opens on the run's summary and plots (report/summary.rst, written by the
# report rule), or on a description of the workflow before a run wrote them
report: report_front_page()


rule all:
    input:
        final_outputs(),
    default_target: True

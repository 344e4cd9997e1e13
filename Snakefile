# rewardprof: sample a policy K times on every task of many RL environments, verify every
# rollout, and profile the reward distribution per task.
#   materialize -> shard (x N) -> rollout (x N) -> merge -> profile
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


include: "rules/common.smk"
include: "rules/checks.smk"
include: "rules/materialize.smk"
include: "rules/shard.smk"
include: "rules/rollout.smk"
include: "rules/model.smk"
include: "rules/merge.smk"
include: "rules/profile.smk"
include: "rules/export.smk"
include: "rules/report.smk"


rule all:
    input:
        final_outputs(),
    default_target: True

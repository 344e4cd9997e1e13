# The config each stage reads, as a file of the run directory: results/<run>/config/<name>.json
# holds only the sections stage <name> depends on (rewardprof.manifest.run_config), full.json all of
# them. The text is a param, so Snakemake reruns this rule, and the stages that read the file,
# only when those sections change; the commands name a path instead of carrying the config.
from rewardprof.manifest.run_config import STAGE_SECTIONS, stage_config_text, write_stage_config


rule stage_config:
    output:
        LAYOUT.stage_config("{name}"),
    params:
        text=lambda wildcards: stage_config_text(CFG, wildcards.name),
    wildcard_constraints:
        name="|".join(STAGE_SECTIONS),
    log:
        LAYOUT.log("config-{name}"),
    run:
        write_stage_config(output[0], params.text, log[0])

# One job per shard. The journal directory is shared by all shards and all layouts and is not
# a declared output: it is the durable store that makes a rerun (or a new num_shards) continue
# instead of starting over.
rule rollout:
    input:
        tasks=f"{RUN}/shards/{{i}}-of-{{n}}.parquet",
        model=engine_model_input(),
    output:
        rollouts=f"{RUN}/rollouts/{{i}}-of-{{n}}.parquet",
    params:
        cfg=stage_config("sampling", "engine", "rollout"),
        journal=f"{RUN}/rollouts/journal",
    resources:
        engine_slots=engine_resources(),
    log:
        rollout=f"{RUN}/logs/rollout/{{i}}-of-{{n}}.log",
        engine=f"{RUN}/logs/engine/{{i}}-of-{{n}}.log",
    benchmark:
        f"{RUN}/benchmarks/rollout/{{i}}-of-{{n}}.tsv"
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof rollout --config-json {params.cfg:q} --tasks {input.tasks}"
        " --journal {params.journal} --out {output.rollouts}"
        " --shard {wildcards.i} --num-shards {wildcards.n}"
        " --engine-log {log.engine} 2> {log.rollout}"

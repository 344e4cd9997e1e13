# One job per shard. The journal directory is shared by all shards and all layouts and is not
# a declared output: it is the durable store that makes a rerun (or a new num_shards) continue
# instead of starting over.
rule rollout:
    input:
        tasks=LAYOUT.shard_tasks("{i}", "{n}"),
        model=engine_model_input(),
        cfg=LAYOUT.stage_config("rollout"),
        prior=adaptive_prior_input(),
    output:
        rollouts=LAYOUT.shard_rollouts("{i}", "{n}"),
    params:
        journal=str(LAYOUT.journal),
        run_dir=lambda wildcards: str(LAYOUT.root),  # its heartbeats, the run line
        prior=["--prior", str(LAYOUT.adaptive_prior)] if BAYES else [],
    resources:
        engine_slots=engine_resources(),
    log:
        rollout=LAYOUT.shard_log("rollout", "{i}", "{n}"),
        engine=LAYOUT.shard_log("engine", "{i}", "{n}"),
    benchmark:
        LAYOUT.shard_benchmark("rollout", "{i}", "{n}")
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof rollout --config {input.cfg:q} --tasks {input.tasks:q}"
        " --journal {params.journal:q} --out {output.rollouts:q}"
        " --shard {wildcards.i:q} --num-shards {wildcards.n:q} {params.prior:q}"
        " --run-dir {params.run_dir:q}"
        " --engine-log {log.engine:q} 2>> {log.rollout:q}"

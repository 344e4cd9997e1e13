# Adaptive sampling, mode bayes (docs/adaptive.md): each shard's first round, then one job fits
# every label's prior over all shards, then the rollout jobs run their rounds with it. The
# prior never depends on the shard layout or on what a restarted job had journaled.
rule adaptive_first_round:
    input:
        tasks=LAYOUT.shard_tasks("{i}", "{n}"),
        model=engine_model_input(),
        cfg=LAYOUT.stage_config("rollout"),
    output:
        done=LAYOUT.first_round("{i}", "{n}"),
    params:
        journal=str(LAYOUT.journal),
        run_dir=lambda wildcards: str(LAYOUT.root),  # its heartbeats, the run line
    resources:
        engine_slots=engine_resources(),
    log:
        rollout=LAYOUT.shard_log("first_round", "{i}", "{n}"),
        engine=LAYOUT.shard_log("first_round_engine", "{i}", "{n}"),
    benchmark:
        LAYOUT.shard_benchmark("first_round", "{i}", "{n}")
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof adaptive-first-round --config {input.cfg:q} --tasks {input.tasks:q}"
        " --journal {params.journal:q} --out {output.done:q}"
        " --shard {wildcards.i:q} --num-shards {wildcards.n:q} --run-dir {params.run_dir:q}"
        " --engine-log {log.engine:q} 2>> {log.rollout:q}"


rule adaptive_prior:
    input:
        tasks=LAYOUT.tasks,
        first_rounds=expand(LAYOUT.first_round("{i}"), i=range(CFG.num_shards)),
        cfg=LAYOUT.stage_config("rollout"),
        # adaptive.warm_start: a new earlier profile refits the priors
        warm=[CFG.adaptive.warm_start] if CFG.adaptive.warm_start else [],
    output:
        prior=LAYOUT.adaptive_prior,
    params:
        journal=str(LAYOUT.journal),
    log:
        LAYOUT.log("adaptive_prior"),
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof adaptive-prior --config {input.cfg:q} --tasks {input.tasks:q}"
        " --journal {params.journal:q} --out {output.prior:q} {input.first_rounds:q} 2> {log:q}"


rule adaptive_audit:
    input:
        tasks=LAYOUT.tasks,
        rollouts=LAYOUT.rollouts,
        prior=LAYOUT.adaptive_prior,
        cfg=LAYOUT.stage_config("rollout"),
    output:
        audit=LAYOUT.adaptive_audit,
    log:
        LAYOUT.log("adaptive_audit"),
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof adaptive-audit --config {input.cfg:q} --tasks {input.tasks:q}"
        " --rollouts {input.rollouts:q} --prior {input.prior:q} --out {output.audit:q} 2> {log:q}"


# What adaptive sampling saved (exact or bayes): the plans in the merged rollouts and, bayes, the
# audit's agreement; the profile puts it in summary.json and says it at the end of the run.
rule adaptive_savings:
    input:
        tasks=LAYOUT.tasks,
        rollouts=LAYOUT.rollouts,
        audit=[LAYOUT.adaptive_audit] if BAYES else [],
    output:
        savings=LAYOUT.adaptive_savings,
    params:
        audit=["--audit", str(LAYOUT.adaptive_audit)] if BAYES else [],
    log:
        LAYOUT.log("adaptive_savings"),
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof adaptive-savings --tasks {input.tasks:q} --rollouts {input.rollouts:q}"
        " {params.audit:q} --out {output.savings:q} 2> {log:q}"

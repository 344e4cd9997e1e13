rule merge:
    input:
        shards=LAYOUT.all_shard_rollouts(),
        tasks=LAYOUT.tasks,
    output:
        rollouts=directory(LAYOUT.rollouts),
        report=LAYOUT.merge_report,
    params:
        journal=str(LAYOUT.journal),
    log:
        LAYOUT.log("merge"),
    benchmark:
        LAYOUT.benchmark("merge")
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof merge --tasks {input.tasks:q} --journal {params.journal:q}"
        " --out {output.rollouts:q} --report {output.report:q} {input.shards:q} 2> {log:q}"

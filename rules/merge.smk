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
        "rewardprof merge --tasks {input.tasks} --journal {params.journal}"
        " --out {output.rollouts} --report {output.report} {input.shards} 2> {log}"

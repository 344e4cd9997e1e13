rule merge:
    input:
        shards=shard_outputs(),
        tasks=f"{RUN}/materialize/tasks.parquet",
    output:
        rollouts=directory(f"{RUN}/rollouts.parquet"),
        report=f"{RUN}/merge_report.json",
    params:
        journal=f"{RUN}/rollouts/journal",
    log:
        f"{RUN}/logs/merge.log",
    benchmark:
        f"{RUN}/benchmarks/merge.tsv"
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof merge --tasks {input.tasks} --journal {params.journal}"
        " --out {output.rollouts} --report {output.report} {input.shards} 2> {log}"

rule shard:
    input:
        tasks=LAYOUT.tasks,
    output:
        tasks=LAYOUT.shard_tasks("{i}", "{n}"),
    log:
        LAYOUT.shard_log("shard", "{i}", "{n}"),
    benchmark:
        LAYOUT.shard_benchmark("shard", "{i}", "{n}")
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof shard --tasks {input.tasks} --out {output.tasks}"
        " --shard {wildcards.i} --num-shards {wildcards.n} 2> {log}"

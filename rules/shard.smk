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
        "rewardprof shard --tasks {input.tasks:q} --out {output.tasks:q}"
        " --shard {wildcards.i:q} --num-shards {wildcards.n:q} 2> {log:q}"

rule shard:
    input:
        tasks=f"{RUN}/materialize/tasks.parquet",
    output:
        tasks=f"{RUN}/shards/{{i}}-of-{{n}}.parquet",
    log:
        f"{RUN}/logs/shard/{{i}}-of-{{n}}.log",
    benchmark:
        f"{RUN}/benchmarks/shard/{{i}}-of-{{n}}.tsv"
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof shard --tasks {input.tasks} --out {output.tasks}"
        " --shard {wildcards.i} --num-shards {wildcards.n} 2> {log}"

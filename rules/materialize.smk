rule materialize:
    input:
        sources=[e.source for e in CFG.entries if isinstance(e.source, str)],
    output:
        tasks=f"{RUN}/materialize/tasks.parquet",
        report=f"{RUN}/materialize/report.json",
    params:
        cfg=stage_config(),
    log:
        f"{RUN}/logs/materialize.log",
    benchmark:
        f"{RUN}/benchmarks/materialize.tsv"
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof materialize --config-json {params.cfg:q}"
        " --tasks {output.tasks} --report {output.report} 2> {log}"

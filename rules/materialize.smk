rule materialize:
    input:
        sources=[e.source for e in CFG.entries if isinstance(e.source, str)],
    output:
        tasks=LAYOUT.tasks,
        report=LAYOUT.materialize_report,
    params:
        cfg=stage_config(),
    log:
        LAYOUT.log("materialize"),
    benchmark:
        LAYOUT.benchmark("materialize")
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof materialize --config-json {params.cfg:q}"
        " --tasks {output.tasks} --report {output.report} 2> {log}"

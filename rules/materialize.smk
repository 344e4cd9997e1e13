rule materialize:
    input:
        sources=[e.source for e in CFG.entries if isinstance(e.source, str)],
        cfg=LAYOUT.stage_config("materialize"),
    output:
        tasks=LAYOUT.tasks,
        report=LAYOUT.materialize_report,
    log:
        LAYOUT.log("materialize"),
    benchmark:
        LAYOUT.benchmark("materialize")
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof materialize --config {input.cfg:q}"
        " --tasks {output.tasks:q} --report {output.report:q} 2> {log:q}"

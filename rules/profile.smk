rule profile:
    input:
        tasks=f"{RUN}/materialize/tasks.parquet",
        rollouts=f"{RUN}/rollouts.parquet",
        report=f"{RUN}/materialize/report.json",
    output:
        tasks=f"{RUN}/profile/tasks.parquet",
        jsonl=f"{RUN}/profile/tasks.jsonl",
        summary=f"{RUN}/profile/summary.json",
        by_label=expand(f"{RUN}/profile/by_label/{{label}}.parquet", label=LABELS),
    params:
        cfg=stage_config("profile"),
        out=lambda wildcards, output: os.path.dirname(output.tasks),
    log:
        f"{RUN}/logs/profile.log",
    benchmark:
        f"{RUN}/benchmarks/profile.tsv"
    conda:
        "../envs/core.yaml"
    shell:
        # the per-environment table goes to the log and to the terminal
        "rewardprof profile --config-json {params.cfg:q} --tasks {input.tasks}"
        " --rollouts {input.rollouts} --report {input.report} --out {params.out}"
        " 2> {log} | tee -a {log}"

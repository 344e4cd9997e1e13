# The filtered, re-weighted training set: each entry's source rows with the profile attached
# under `reward_profile`, per label and combined, plus the kept/dropped report (docs/profile.md).
rule export:
    input:
        profile=f"{RUN}/profile/tasks.parquet",
        report=f"{RUN}/materialize/report.json",
    output:
        combined=f"{RUN}/export/combined.jsonl",
        by_label=expand(f"{RUN}/export/by_label/{{label}}.jsonl", label=LABELS),
        report=f"{RUN}/export/report.json",
    params:
        cfg=stage_config("profile", "export"),
        out=lambda wildcards, output: os.path.dirname(output.combined),
    log:
        f"{RUN}/logs/export.log",
    benchmark:
        f"{RUN}/benchmarks/export.tsv"
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof export --config-json {params.cfg:q} --profile {input.profile}"
        " --report {input.report} --out {params.out} 2> {log} | tee -a {log}"

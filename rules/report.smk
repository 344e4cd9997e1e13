# Plots and tables of the profile and the export; `snakemake --report report.html` collects
# every output declared with report() below (docs/profile.md, "Report").
rule report:
    input:
        profile=f"{RUN}/profile/tasks.parquet",
        summary=f"{RUN}/profile/summary.json",
        export=f"{RUN}/export/report.json",
    output:
        hist=report(
            f"{RUN}/report/pass_rate_hist.png",
            category="Profile",
            labels={"figure": "pass-rate histogram per label"},
        ),
        tokens=report(
            f"{RUN}/report/tokens_vs_pass_rate.png",
            category="Profile",
            labels={"figure": "output tokens vs pass rate"},
        ),
        failures=report(
            f"{RUN}/report/failures.png",
            category="Profile",
            labels={"figure": "failures and truncation per label"},
        ),
        labels=report(
            f"{RUN}/report/labels.csv",
            category="Tables",
            labels={"table": "per-label summary"},
        ),
        export=report(
            f"{RUN}/report/export.csv",
            category="Tables",
            labels={"table": "export: kept and dropped per label"},
        ),
    params:
        out=lambda wildcards, output: os.path.dirname(output.hist),
    log:
        f"{RUN}/logs/report.log",
    benchmark:
        f"{RUN}/benchmarks/report.tsv"
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof report --profile {input.profile} --summary {input.summary}"
        " --export-report {input.export} --out {params.out} > {log} 2>&1"

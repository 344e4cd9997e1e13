# Plots and tables of the profile and the export; `snakemake --report report.html` collects
# every output declared with report() below (docs/profile.md, "Report").
rule report:
    input:
        profile=LAYOUT.profile_tasks,
        summary=LAYOUT.profile_summary,
        export=LAYOUT.export_report,
    output:
        hist=report(
            LAYOUT.report_file("hist"),
            category="Profile",
            labels={"figure": "pass-rate histogram per label"},
        ),
        tokens=report(
            LAYOUT.report_file("tokens"),
            category="Profile",
            labels={"figure": "output tokens vs pass rate"},
        ),
        failures=report(
            LAYOUT.report_file("failures"),
            category="Profile",
            labels={"figure": "failures and truncation per label"},
        ),
        steps=report(
            LAYOUT.report_file("steps"),
            category="Profile",
            labels={"figure": "model turns per episode, by environment"},
        ),
        labels=report(
            LAYOUT.report_file("labels"),
            category="Tables",
            labels={"table": "per-label summary"},
        ),
        export=report(
            LAYOUT.report_file("export"),
            category="Tables",
            labels={"table": "export: kept and dropped per label"},
        ),
        # the report's front page (Snakefile: report), the summary and the plots
        front_page=LAYOUT.report_file("front_page"),
    params:
        out=lambda wildcards, output: os.path.dirname(output.hist),
        run_dir=lambda wildcards: str(LAYOUT.root),  # the front page's summary
    log:
        LAYOUT.log("report"),
    benchmark:
        LAYOUT.benchmark("report")
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof report --profile {input.profile:q} --summary {input.summary:q}"
        " --export-report {input.export:q} --out {params.out:q} --run-dir {params.run_dir:q}"
        " > {log:q} 2>&1"

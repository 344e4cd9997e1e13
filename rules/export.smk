# The filtered, re-weighted training set: each entry's source rows with the profile attached
# under `reward_profile`, per label and combined, plus the kept/dropped report (docs/profile.md).
rule export:
    input:
        profile=LAYOUT.profile_tasks,
        report=LAYOUT.materialize_report,
        cfg=LAYOUT.stage_config("export"),
    output:
        combined=LAYOUT.export_combined,
        by_label=expand(LAYOUT.export_by_label("{label}"), label=LABELS),
        report=LAYOUT.export_report,
    params:
        out=lambda wildcards, output: os.path.dirname(output.combined),
    log:
        LAYOUT.log("export"),
    benchmark:
        LAYOUT.benchmark("export")
    conda:
        "../envs/core.yaml"
    shell:
        "rewardprof export --config {input.cfg:q} --profile {input.profile:q}"
        " --report {input.report:q} --out {params.out:q} 2> {log:q} | tee -a {log:q}"

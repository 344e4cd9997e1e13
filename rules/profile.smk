rule profile:
    input:
        tasks=LAYOUT.tasks,
        rollouts=LAYOUT.rollouts,
        report=LAYOUT.materialize_report,
        cfg=LAYOUT.stage_config("profile"),
        savings=adaptive_savings_input(),
    output:
        tasks=LAYOUT.profile_tasks,
        jsonl=LAYOUT.profile_jsonl,
        summary=LAYOUT.profile_summary,
        by_label=expand(LAYOUT.profile_by_label("{label}"), label=LABELS),
    params:
        out=lambda wildcards, output: os.path.dirname(output.tasks),
        savings=["--savings", str(LAYOUT.adaptive_savings)] if ADAPTIVE else [],
    log:
        LAYOUT.log("profile"),
    benchmark:
        LAYOUT.benchmark("profile")
    conda:
        "../envs/core.yaml"
    shell:
        # the per-environment table goes to the log and to the terminal
        "rewardprof profile --config {input.cfg:q} --tasks {input.tasks:q}"
        " --rollouts {input.rollouts:q} --report {input.report:q} --out {params.out:q}"
        " {params.savings:q}"
        " 2> {log:q} | tee -a {log:q}"

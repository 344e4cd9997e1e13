# Checks around the run (no rules here): sources before the DAG is built, the endpoint before
# any job starts, and what the journal says about re-keyed / orphaned rollouts after the run.
import time

from rewardprof.core.config import ConfigError
from rewardprof.sources.checks import check_sources

_STARTED = time.time()

# Once, in the command the user typed: a job that Snakemake runs as its own process (each job
# on a cluster) parses this file again, with the sources already checked
if workflow.is_main_process:
    try:
        check_sources(CFG)
    except ConfigError as exc:
        sys.exit(f"rewardprof: invalid config: {exc}")

# `snakemake --report` of a run that is not the config's: Snakemake's own error names a missing
# plot, not the missing --configfile. Nothing in Snakemake tells a Snakefile it makes a report
# but the command line.
if any(a == "--report" or a.startswith("--report=") for a in sys.argv[1:]):
    _plot = LAYOUT.report_file("hist")
    if not _plot.exists():
        sys.exit(
            f"rewardprof: --report: no finished run of this config in {LAYOUT.root}/ "
            f"({_plot} is missing). Give the config the run used, as for the run itself: "
            f"snakemake --report report.html --configfile my-sweep.yaml"
        )


onstart:
    # the optional packages of every step the DAG will run, before its first job
    from rewardprof.core.extras import check_steps

    try:
        check_steps({job.rule.name for job in workflow.dag.needrun_jobs()})
    except MissingPackage as exc:
        sys.exit(f"rewardprof: {exc}")
    # Endpoint mode: fail with the URL before any job is submitted, and only when rollout
    # jobs are due (a profile-only rerun needs no endpoint). Never in a dry run (Snakemake
    # does not call onstart then). REWARDPROF_NO_PREFLIGHT=1 skips it.
    if CFG.engine.mode == "endpoint" and any(
        job.rule.name == "rollout" for job in workflow.dag.needrun_jobs()
    ):
        from rewardprof.engine.preflight import endpoint_problem

        problem = endpoint_problem(CFG)
        if problem:
            sys.exit(f"rewardprof: {problem}")


onsuccess:
    from rewardprof.stages.merge import journal_notes

    from rewardprof.stages.run_summary import summary_lines

    for note in journal_notes(LAYOUT.merge_report, since=_STARTED):
        print(f"rewardprof: {note}", file=sys.stderr)
    # the result, last on the terminal (when this run wrote the profile)
    for line in summary_lines(LAYOUT.root, since=_STARTED):
        print(line, file=sys.stderr)

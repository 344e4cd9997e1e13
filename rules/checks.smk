# Checks around the run (no rules here): sources before the DAG is built, the endpoint before
# any job starts, and what the journal says about re-keyed / orphaned rollouts after the run.
import time

from rewardprof.core.config import ConfigError
from rewardprof.engine.preflight import check_sources

_STARTED = time.time()

try:
    check_sources(CFG)
except ConfigError as exc:
    sys.exit(f"rewardprof: invalid config: {exc}")


onstart:
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

    for note in journal_notes(LAYOUT.merge_report, since=_STARTED):
        print(f"rewardprof: {note}", file=sys.stderr)

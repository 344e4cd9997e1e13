"""Processes forked from a server that imported their code once: the test process's one
multiprocessing forkserver, with every preload a harness here needs (multiprocessing starts one
server per process, with the preload it was given first, so the harnesses share one list).

`run_snakemake` runs the real Snakemake CLI, `snakemake.cli.main(argv)` as `python -m snakemake`
runs it, in a forked child that chdirs to the run's directory, takes the run's environment and
writes its output to files: the same run as a new interpreter, without importing Snakemake (and
the pandas its Slurm plugin imports) again, ~1 s of CPU per call, a few hundred calls a suite.
The kill harness forks its shard attempts from the same server (harness/kill_harness.py)."""

from __future__ import annotations

import multiprocessing
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

PRELOAD = [
    "snakemake.cli",
    "rewardprof.stages.rollout.runner",
    "harness.warm_math",
    "harness.kill_harness",
]


# CPU seconds of the Snakemake runs forked so far (the child's own and its jobs'): the forkserver,
# not this process, reaps them, so harness/cpu_report.py adds this to what a test waited for
forked_cpu_s = 0.0


def context():
    """The forkserver context, its server preloaded with PRELOAD when this process starts it."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def _cpu_seconds() -> float:
    own, jobs = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + jobs.ru_utime + jobs.ru_stime


def _snakemake_main(argv: list[str], cwd: str, env: dict, out: str, err: str) -> None:
    """Forkserver child: Snakemake's CLI in `cwd` with `env`, its stdout and stderr to files,
    the CPU it and its jobs used to `out`.cpu."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)  # what the jobs Snakemake starts inherit
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.argv = ["snakemake", *argv]
    from snakemake.cli import main  # lazy: preloaded in the server, so no import happens here

    try:
        main(argv)  # exits: SystemExit's code becomes the process's exit code
    finally:
        Path(out + ".cpu").write_text(str(_cpu_seconds()))


def run_snakemake(
    cmd: list[str], cwd: Path, env: dict, timeout: float
) -> subprocess.CompletedProcess:
    """`cmd` (`python -m snakemake ...`) run in `cwd` as subprocess.run with capture_output and
    text would run it, its CLI forked from the server: killed (SIGKILL) and TimeoutExpired
    raised after `timeout` seconds."""
    assert cmd[1:3] == ["-m", "snakemake"], cmd
    argv = cmd[3:]
    with tempfile.TemporaryDirectory(prefix="snakemake-run-") as tmp:
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        proc = context().Process(target=_snakemake_main, args=(argv, str(cwd), env, out, err))
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise subprocess.TimeoutExpired(cmd, timeout)
        stdout, stderr, cpu = (
            Path(p).read_text(errors="replace") if os.path.exists(p) else ""
            for p in (out, err, out + ".cpu")
        )
        global forked_cpu_s
        forked_cpu_s += float(cpu or 0)
        return subprocess.CompletedProcess(cmd, proc.exitcode, stdout, stderr)

"""`rewardprof launch --slurm`: run the Snakemake controller itself as a Slurm job.

A sweep's controller lives for days; many clusters forbid that on login nodes. The launcher
submits the controller with submitit as a small long job (1 CPU, a few GB). Snakemake inside it
submits the workflow's jobs as usual (`--profile slurm`).

Requeue: at TIMEOUT (Slurm signals USR2 `signal_delay_s` before the limit) or when the cluster
preempts the job, the controller interrupts Snakemake (SIGINT: it scancels its running jobs and
releases its lock), and submitit requeues the job. The requeued controller runs
`snakemake --rerun-incomplete` again, and rollout jobs resume from their journals: nothing
already journaled is regenerated. `scancel` of the controller job stops the whole run.

Snakemake itself is a child process with USR2 ignored: Slurm signals every process of the job,
and USR2's default action would kill Snakemake before it could cancel its jobs. Its SIGINT is
reset to the default, since a controller started in the background inherits SIGINT ignored.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from rewardprof.core.errors import RewardprofError
from rewardprof.core.extras import require
from rewardprof.tools.slurm_config import user_profile_root

DEFAULT_LOG_DIR = ".snakemake/launch"
STOP_GRACE_S = 60  # Snakemake's time to scancel its jobs after SIGINT


class ControllerFailed(RewardprofError, RuntimeError):
    """The Snakemake controller job failed, or ended without a result."""


def _snakemake_signals() -> None:
    """preexec_fn: USR2 ignored (inherited through exec); SIGINT at its default even if this
    controller was started with it ignored (in the background by a non-interactive shell):
    SIGINT is how the controller stops Snakemake."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Controller:
    """The submitted callable: `snakemake <args>` in `workdir`; checkpointable for submitit."""

    workdir: str
    snakemake_args: list[str]
    attempt: int = 0
    env: dict[str, str] = field(default_factory=dict)

    def command(self) -> list[str]:
        args = list(self.snakemake_args)
        if "--rerun-incomplete" not in args and "--ri" not in args:
            args.append("--rerun-incomplete")
        return [sys.executable, "-m", "snakemake", *args]

    def _requeued(self) -> bool:
        return self.attempt > 0 or int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0

    def _environment(self) -> dict[str, str]:
        env = {**os.environ, **self.env}
        # the rules call `rewardprof`: the interpreter's bin directory first on PATH
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        return env

    def __call__(self) -> int:
        self._proc: subprocess.Popen | None = None
        self._exited: threading.Event | None = None
        env = self._environment()
        restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
        print(
            f"rewardprof controller: attempt {self.attempt}, Slurm restarts {restarts}, "
            f"workdir {self.workdir}",
            flush=True,
        )
        if self._requeued():
            # the previous controller was stopped (timeout/preemption) and may have left its
            # lock behind; Slurm runs one instance of this job, so nobody else holds it
            subprocess.run(
                [sys.executable, "-m", "snakemake", *self.snakemake_args, "--unlock"],
                cwd=self.workdir,
                env=env,
                check=False,
            )
        cmd = self.command()
        print("rewardprof controller: " + " ".join(cmd), flush=True)
        self._proc = proc = subprocess.Popen(
            cmd, cwd=self.workdir, env=env, preexec_fn=_snakemake_signals
        )
        # a thread reaps snakemake; the main thread stays free for the signal handlers (a
        # handler interrupting Popen.wait() could never wait for the process itself)
        self._exited = threading.Event()
        threading.Thread(target=lambda: (proc.wait(), self._exited.set()), daemon=True).start()
        old_term = signal.signal(signal.SIGTERM, self._on_sigterm)
        try:
            while not self._exited.wait(1.0):
                pass
        finally:
            signal.signal(signal.SIGTERM, old_term)
        rc = proc.returncode
        if rc != 0:
            raise ControllerFailed(f"snakemake exited with status {rc}")
        return rc

    def _on_sigterm(self, signum, frame) -> None:
        # scancel or preemption: Snakemake got SIGTERM too, which only makes it wait for its
        # running jobs (hours); SIGINT makes it cancel them now
        print("rewardprof controller: SIGTERM: stopping snakemake (cancels its jobs)", flush=True)
        self._interrupt(wait=False)

    def _interrupt(self, wait: bool = True) -> None:
        proc, exited = getattr(self, "_proc", None), getattr(self, "_exited", None)
        if proc is None or exited is None or exited.is_set():
            return
        os.kill(proc.pid, signal.SIGINT)  # the reaper thread owns proc: no Popen calls here
        if wait and not exited.wait(STOP_GRACE_S):
            os.kill(proc.pid, signal.SIGKILL)
            exited.wait(30)

    def checkpoint(self, *args, **kwargs):
        """submitit calls this on timeout/preemption (USR2): stop Snakemake, requeue a fresh
        controller that reruns with --rerun-incomplete."""
        submitit = require("submitit", "rewardprof launch", "slurm")
        print(
            f"rewardprof controller: checkpoint at attempt {self.attempt}: stopping snakemake",
            flush=True,
        )
        self._interrupt(wait=True)
        return submitit.helpers.DelayedSubmission(
            Controller(self.workdir, self.snakemake_args, self.attempt + 1, self.env)
        )

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.pop("_proc", None)
        state.pop("_exited", None)
        return state


@dataclass
class LaunchOptions:
    cluster: str = "slurm"  # "slurm" | "local" (submitit's local executor, for tests)
    log_dir: str = DEFAULT_LOG_DIR
    time_min: int = 2880
    cpus: int = 1
    mem_gb: float = 4
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    max_requeues: int = 30
    signal_delay_s: int = 120
    job_name: str = "rewardprof-controller"


def make_executor(opts: LaunchOptions):
    submitit = require("submitit", "rewardprof launch", "slurm")
    folder = Path(opts.log_dir) / "%j"
    if opts.cluster == "slurm":
        ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=opts.max_requeues)
        extra: dict[str, object] = {"requeue": True}
        if opts.account:
            extra["account"] = opts.account
        if opts.qos:
            extra["qos"] = opts.qos
        ex.update_parameters(
            time=opts.time_min,
            cpus_per_task=opts.cpus,
            mem=f"{int(opts.mem_gb * 1024)}M",
            ntasks_per_node=1,
            job_name=opts.job_name,
            signal_delay_s=opts.signal_delay_s,
            additional_parameters=extra,
            **({"partition": opts.partition} if opts.partition else {}),
        )
    elif opts.cluster == "local":
        ex = submitit.LocalExecutor(folder=folder, max_num_timeout=opts.max_requeues)
        ex.update_parameters(timeout_min=opts.time_min, signal_delay_s=opts.signal_delay_s)
    else:
        raise ValueError(f"unknown cluster {opts.cluster!r}")
    return ex


def default_snakemake_args() -> list[str]:
    """`--profile slurm` when installed, else the checkout's profiles/slurm."""
    if (user_profile_root() / "slurm").exists():
        return ["--profile", "slurm"]
    return ["--profile", "profiles/slurm"]


def launch(snakemake_args: list[str], opts: LaunchOptions, workdir: str | None = None):
    """Submit the controller; returns the submitit Job."""
    controller = Controller(str(Path(workdir or os.getcwd()).resolve()), list(snakemake_args))
    return make_executor(opts).submit(controller)


def follow_hint(job, opts: LaunchOptions) -> str:
    out, err = Path(job.paths.stdout).resolve(), Path(job.paths.stderr).resolve()
    lines = [
        f"submitted the Snakemake controller as job {job.job_id} ({opts.cluster})",
        f"  log:     tail -f {err}   (Snakemake; the controller's own: {out.name})",
    ]
    if opts.cluster == "slurm":
        lines += [
            f"  status:  squeue -j {job.job_id}   (and squeue --me for the workflow's jobs)",
            f"  stop:    scancel {job.job_id}   (the controller cancels its jobs first)",
            "  resume:  rewardprof launch --slurm again: rollouts continue from the journals",
        ]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of `rewardprof launch` (the command table is in rewardprof.cli)."""
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--slurm",
        dest="cluster",
        action="store_const",
        const="slurm",
        help="submit the controller to Slurm (submitit)",
    )
    where.add_argument(
        "--local",
        dest="cluster",
        action="store_const",
        const="local",
        help="submitit's local executor (testing the requeue path)",
    )
    p.add_argument(
        "--time",
        dest="time_min",
        metavar="TIME",
        type=int,
        default=2880,
        help="minutes per attempt (default 2880)",
    )
    p.add_argument("--cpus", type=int, default=1, help="CPUs of the controller job (default 1)")
    p.add_argument("--mem-gb", type=float, default=4, help="its memory in GB (default 4)")
    p.add_argument("--partition", default=None, help="its partition (default: the cluster's)")
    p.add_argument("--account", default=None, help="its account (default: the cluster's)")
    p.add_argument("--qos", default=None, help="its QOS (default: none)")
    p.add_argument(
        "--max-requeues",
        type=int,
        default=30,
        help="how many timeouts may requeue the controller (preemptions always do)",
    )
    p.add_argument(
        "--signal-delay",
        dest="signal_delay_s",
        metavar="SIGNAL_DELAY",
        type=int,
        default=120,
        help="seconds before the time limit at which the controller checkpoints",
    )
    p.add_argument(
        "--log-dir",
        default=DEFAULT_LOG_DIR,
        help=f"where submitit keeps the controller's logs (default {DEFAULT_LOG_DIR})",
    )
    p.add_argument("--wait", action="store_true", help="block until the controller finishes")
    p.add_argument(
        "snakemake_args", nargs=argparse.REMAINDER, help="-- then the snakemake arguments"
    )


def run_command(args: argparse.Namespace) -> int:
    """`rewardprof launch`: submit the controller; with --wait, follow it to its end."""
    sm_args = list(args.snakemake_args)
    if sm_args and sm_args[0] == "--":
        sm_args = sm_args[1:]
    if not sm_args:
        sm_args = default_snakemake_args()
    # the arguments are named as LaunchOptions' fields (dest)
    opts = LaunchOptions(
        **{
            f.name: getattr(args, f.name)
            for f in dataclasses.fields(LaunchOptions)
            if f.name in vars(args)
        }
    )
    job = launch(sm_args, opts)
    print(follow_hint(job, opts), flush=True)
    if not args.wait:
        return 0
    try:
        wait_for(job, opts.cluster)
    except Exception as exc:  # submitit re-raises the controller's failure (with traceback)
        lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
        why = next(
            (x for x in lines if "ControllerFailed" in x), lines[0] if lines else type(exc).__name__
        )
        print(
            f"rewardprof launch: controller job {job.job_id} failed: {why}\n"
            f"  log: {job.paths.stdout} (Snakemake's own: {job.paths.stderr})",
            flush=True,
        )
        return 1
    print(f"rewardprof launch: controller job {job.job_id} finished", flush=True)
    return 0


_ALIVE = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "CONFIGURING",
    "COMPLETING",
    "SUSPENDED",
    "PREEMPTED",
    "RESIZING",
    "SIGNALING",
    "STAGE_OUT",
}


def slurm_state(job_id: str) -> str | None:
    """The job's state from slurmctld (squeue keeps finished jobs for MinJobAge); None if gone.
    Not sacct: clusters without accounting have none (submitit's own polling uses sacct)."""
    r = subprocess.run(
        ["squeue", "-h", "-j", str(job_id), "--states=all", "-o", "%T"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    state = r.stdout.strip().splitlines()
    return state[0].strip() if r.returncode == 0 and state else None


def wait_for(job, cluster: str, poll_s: float = 2.0, grace_s: float = 15.0):
    """Block until the controller finished; its result (raises the controller's error)."""
    result = Path(job.paths.result_pickle)
    ended_at = None
    while not result.exists():
        if cluster == "slurm":
            state = slurm_state(job.job_id)
            if state in _ALIVE:
                ended_at = None
            elif ended_at is None:
                ended_at = time.monotonic()
            elif time.monotonic() - ended_at > grace_s:
                raise ControllerFailed(
                    f"controller job {job.job_id} ended ({state or 'gone'}) "
                    f"without a result; see {job.paths.stdout}"
                )
        elif job.done():
            break
        time.sleep(poll_s)
    return job.result()

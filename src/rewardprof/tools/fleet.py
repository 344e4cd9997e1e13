"""`rewardprof fleet start|serve|stop|status`: one engine fleet shared by a sweep's rollout jobs.

- `start --config C`: starts `fleet serve` for the config's run (results/<run>/fleet/), as a
  background process on this machine (`fleet.launcher: local`) or as one long-lived Slurm job
  (`fleet.launcher: slurm`: an sbatch script of `fleet.replicas` tasks, one replica per task via
  srun; `fleet.sbatch_args` size it). It records how in `fleet/fleet.json`. `--wait S` returns
  once a replica is published (or fails after S seconds with the fleet's log tail).
- `serve`: the fleet itself, in the foreground (rewardprof.engine.fleet).
- `stop RUN_DIR`: creates `fleet/stop` (every fleet process stops when it sees it, on any node)
  and signals the process (local) or scancels the job (slurm); waits for the replicas to stop.
- `status RUN_DIR`: how the fleet was started and each replica's state and URL.

Rollout jobs use the fleet in endpoint mode: `engine.mode: endpoint`, `engine.endpoints_file:
results/<run>/fleet/endpoints.json` (docs/engine.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from rewardprof.core.atomic import write_json_atomic
from rewardprof.core.config import Config
from rewardprof.core.errors import RewardprofError
from rewardprof.engine.endpoints import EndpointsFileError, read_endpoints
from rewardprof.engine.fleet import serve_fleet
from rewardprof.manifest.load import load_config
from rewardprof.store.layout import FleetLayout, RunLayout

STOP_WAIT_S = 120


class FleetError(RewardprofError):
    """The fleet could not be started, found or stopped; the message says what to do."""


def _run_dir(cfg: Config, given: str | None) -> Path:
    return Path(given) if given else RunLayout.for_run(cfg.run).root


def _read_state(paths: FleetLayout) -> dict:
    try:
        return json.loads(paths.state.read_text())
    except (OSError, ValueError):
        raise FleetError(f"{paths.state}: no fleet started for this run directory") from None


def _serve_argv(config: str, run_dir: Path) -> list[str]:
    """`rewardprof fleet serve` of this installation (the console script next to Python)."""
    command = Path(sys.executable).parent / "rewardprof"
    return [str(command), "fleet", "serve", "--config", config, "--run-dir", str(run_dir)]


def sbatch_script(cfg: Config, config: str, run_dir: Path) -> str:
    """The Slurm job of a fleet: one task per replica; task 0 also publishes the endpoints.
    Its log's path is given on sbatch's command line (sbatch_argv), not in a #SBATCH line,
    where a run directory with a space would be cut at it."""
    serve = [*_serve_argv(str(Path(config).resolve()), run_dir.resolve()), "--rank"]
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=rewardprof-fleet-{cfg.run}",
        f"#SBATCH --ntasks={cfg.fleet.replicas}",
        *(f"#SBATCH {arg}" for arg in cfg.fleet.sbatch_args),
        f"cd {shlex.quote(str(Path.cwd()))}",
        # one task per replica, each serving the replica of its rank ($SLURM_PROCID, expanded
        # by each task's own shell); srun passes scancel's SIGTERM on to every task
        "exec srun --kill-on-bad-exit=0 bash -c "
        + shlex.quote(shlex.join(serve) + ' "$SLURM_PROCID"'),
    ]
    return "\n".join(lines) + "\n"


def sbatch_argv(run_dir: Path, script: Path) -> list[str]:
    """How the fleet's job is submitted: its log next to the endpoints file."""
    log = FleetLayout(RunLayout(run_dir)).slurm_log("%j").resolve()
    return ["sbatch", "--parsable", f"--output={log}", str(script)]


def start(cfg: Config, config: str, run_dir: Path, wait_s: float | None) -> dict:
    paths = FleetLayout(RunLayout(run_dir))
    paths.dir.mkdir(parents=True, exist_ok=True)
    if paths.state.exists() and _running(_read_state(paths)):
        raise FleetError(
            f"{paths.state}: a fleet is already running for {run_dir}; "
            f"`rewardprof fleet stop {run_dir}` first"
        )
    paths.stop.unlink(missing_ok=True)
    if paths.endpoints.exists():
        paths.endpoints.unlink()  # a stopped fleet's list must not be mistaken for this one's
    if cfg.fleet.launcher == "local":
        with paths.log.open("ab") as log:
            proc = subprocess.Popen(
                _serve_argv(config, run_dir),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives this command and its terminal
            )
        state = {"launcher": "local", "pid": proc.pid, "log": str(paths.log)}
    else:
        script = paths.sbatch_script
        script.write_text(sbatch_script(cfg, config, run_dir))
        out = subprocess.run(
            sbatch_argv(run_dir, script), capture_output=True, text=True, check=False
        )
        if out.returncode != 0:
            raise FleetError(f"sbatch {script} failed: {out.stderr.strip() or out.stdout.strip()}")
        job = out.stdout.strip().split(";")[0]
        state = {"launcher": "slurm", "job_id": job, "log": str(paths.slurm_log(job))}
    state.update(replicas=cfg.fleet.replicas, started_at=time.time(), config=config)
    write_json_atomic(paths.state, state)
    if wait_s is not None:
        _wait_published(paths, state, wait_s)
    return state


def _running(state: dict) -> bool:
    if state.get("launcher") == "local":
        try:
            os.kill(int(state["pid"]), 0)
        except (OSError, KeyError, ValueError):
            return False
        return True
    out = subprocess.run(
        ["squeue", "-h", "-j", str(state.get("job_id")), "-o", "%T"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.returncode == 0 and bool(out.stdout.strip())


def _wait_published(paths: FleetLayout, state: dict, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if _published(paths):
            return
        if not _running(state):
            break
        time.sleep(1.0)
    raise FleetError(
        f"fleet: no replica published in {paths.endpoints} after {wait_s:.0f}s; "
        f"see {state.get('log')} and {paths.replica_log('*')}"
    )


def _published(paths: FleetLayout) -> list[str]:
    """The endpoints the fleet publishes now (none while the file is not written yet)."""
    try:
        return read_endpoints(paths.endpoints)
    except EndpointsFileError:
        return []


def stop(run_dir: Path, wait_s: float = STOP_WAIT_S) -> dict:
    paths = FleetLayout(RunLayout(run_dir))
    state = _read_state(paths)
    paths.stop.touch()
    if state.get("launcher") == "local":
        with contextlib.suppress(ProcessLookupError):  # already gone: nothing to signal
            os.kill(int(state["pid"]), signal.SIGTERM)
    else:
        subprocess.run(["scancel", str(state["job_id"])], check=False)
    deadline = time.monotonic() + wait_s
    while _running(state):
        if time.monotonic() > deadline:
            raise FleetError(f"fleet: still running {wait_s:.0f}s after stop; see {state['log']}")
        time.sleep(0.5)
    return state


def status(run_dir: Path) -> dict:
    paths = FleetLayout(RunLayout(run_dir))
    state = _read_state(paths)
    replicas = []
    for i in range(int(state.get("replicas") or 0)):
        try:
            replicas.append(json.loads(paths.replica(i).read_text()))
        except (OSError, ValueError):
            replicas.append({"index": i, "state": "pending"})
    endpoints = _published(paths)
    return dict(state, running=_running(state), endpoints=endpoints, replica_states=replicas)


def format_fleet(st: dict) -> str:
    where = f"pid {st['pid']}" if st["launcher"] == "local" else f"Slurm job {st['job_id']}"
    lines = [
        f"fleet ({st['launcher']}, {where}): {'running' if st['running'] else 'not running'}, "
        f"{len(st['endpoints'])} of {st['replicas']} replicas published"
    ]
    for r in st["replica_states"]:
        lines.append(
            f"  replica {r['index']}: {r['state']:<9} {r.get('url') or r.get('error') or ''}"
        )
    return "\n".join(lines)


def run_command(args: argparse.Namespace) -> int:
    if args.action in ("start", "serve"):
        if not args.config:
            raise FleetError(f"rewardprof fleet {args.action}: give --config FILE")
        cfg = load_config(args.config)
        run_dir = _run_dir(cfg, args.run_dir_opt or args.run_dir)
        if args.action == "serve":
            ranks = [args.rank] if args.rank is not None else list(range(cfg.fleet.replicas))
            fleet = FleetLayout(RunLayout(run_dir))
            return serve_fleet(cfg, fleet, ranks, publisher=args.rank in (None, 0))
        state = start(cfg, args.config, run_dir, args.wait)
        endpoints = FleetLayout(RunLayout(run_dir)).endpoints
        print(f"fleet started ({state['launcher']}); endpoints: {endpoints}")
        return 0
    if not args.run_dir:
        raise FleetError(f"rewardprof fleet {args.action}: give the run directory")
    run_dir = Path(args.run_dir)
    if args.action == "stop":
        stop(run_dir)
        print(f"fleet of {run_dir} stopped")
        return 0
    st = status(run_dir)
    print(json.dumps(st, indent=2) if args.json else format_fleet(st))
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "action",
        choices=["start", "serve", "stop", "status"],
        help="start the fleet in the background, serve it in the foreground, stop it, show it",
    )
    p.add_argument("run_dir", nargs="?", help="stop/status: the run directory, results/<run>")
    p.add_argument("--config", help="start/serve: the sweep's config (engine and fleet sections)")
    p.add_argument("--run-dir", dest="run_dir_opt", help="start/serve: default results/<run>")
    p.add_argument("--wait", type=float, metavar="S", help="start: until a replica is published")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)  # serve: one replica (srun task)
    p.add_argument("--json", action="store_true", help="status: as JSON")

"""A shared engine fleet: the process behind `rewardprof fleet serve` (started by `rewardprof
fleet start`, tools/fleet.py, as a background process or inside one long Slurm job).

It runs replicas of the engine the config describes (`engine.model`, `serve_args`, `python`,
`host`: serve mode's server, rewardprof.engine.server) and publishes the ones that are ready in
the endpoints file (`{"endpoints": [...]}`, written atomically) for rollout jobs in endpoint
mode (`engine.endpoints_file`). The model loads once per sweep, not once per shard job. Its
files, under `results/<run>/fleet/`, are named by store/layout.py (`FleetLayout`) and handed
over by tools/fleet.py (`FleetFiles`).

- Each replica's keeper thread writes `fleet/replicas/<i>.json` (its URL and state: starting,
  ready, dead, stopped). One process, the publisher (the only one locally; rank 0 of a Slurm
  job's tasks), turns those files into endpoints.json every second: one writer, and replicas
  on other nodes of the job publish through the shared filesystem.
- A replica that dies is dropped from endpoints.json within a second and started again, up to
  `fleet.restarts` times (clients take it out by themselves at once: engine/balancer.py); the
  last replica's death leaves the list as it was until one is ready again (`to_publish`): an
  empty list means the fleet stopped.
- The fleet stops on SIGTERM/SIGINT (`rewardprof fleet stop`, scancel) or when
  `fleet/stop` exists: every replica is stopped (SIGTERM, grace, SIGKILL, the sweep of its
  processes) and endpoints.json is left listing none.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from rewardprof.core.atomic import write_json_atomic
from rewardprof.core.config import Config
from rewardprof.engine.endpoints import replica_capacity, write_endpoints
from rewardprof.engine.server import EngineError, VLLMServer

log = logging.getLogger("rewardprof.fleet")

PUBLISH_EVERY_S = 1.0


@runtime_checkable
class FleetFiles(Protocol):
    """The files a fleet reads and writes, named and handed over by its caller
    (store/layout.py `FleetLayout`, built by tools/fleet.py): the engine names no file of a
    run directory."""

    endpoints: Path  # the published list (engine/endpoints.py's format)
    stop: Path  # the fleet stops when it exists
    replicas: Path  # the directory of the replicas' files

    def replica(self, i: int) -> Path: ...  # replica i's URL and state, written by its keeper

    def replica_log(self, i: int | str) -> Path: ...  # replica i's server log ("*": them all)


class _Replica(VLLMServer):
    """A fleet's server: its death is the keeper's to handle (no interrupt of the main
    thread, as serve mode's watchdog does for a rollout job)."""

    def _watch(self) -> None:
        return


def published_url(server: VLLMServer) -> str:
    """The URL clients on other nodes reach: the host name when the server binds every
    address (engine.host 0.0.0.0), else the address it binds."""
    if server.cfg.engine.host in ("0.0.0.0", "::", ""):
        return f"http://{socket.gethostname()}:{server.port}/v1"
    return server.base_url


class Keeper(threading.Thread):
    """Starts replica `index`, keeps its file up to date, restarts it when it dies."""

    def __init__(self, cfg: Config, paths: FleetFiles, index: int, stopping: threading.Event):
        super().__init__(name=f"replica-{index}", daemon=True)
        self.cfg, self.paths, self.index, self.stopping = cfg, paths, index, stopping
        self.server: _Replica | None = None
        self.lock = threading.Lock()
        self.starts = 0

    def _state(self, state: str, **fields) -> None:
        write_json_atomic(
            self.paths.replica(self.index),
            {
                "index": self.index,
                "state": state,
                "host": socket.gethostname(),
                "starts": self.starts,
                "updated_at": time.time(),
                **fields,
            },
        )

    def run(self) -> None:
        while not self.stopping.is_set() and self.starts <= self.cfg.fleet.restarts:
            self.starts += 1
            server = _Replica(self.cfg, self.paths.replica_log(self.index))
            with self.lock:
                if self.stopping.is_set():
                    return
                self.server = server
            self._state("starting")
            try:
                server.start()
            except EngineError as exc:
                log.error("replica %d: did not start: %s", self.index, exc)
                self._state("dead", error=str(exc).splitlines()[0])
                continue
            url = published_url(server)
            self._state("ready", url=url, pid=server.proc.pid if server.proc else None)
            log.info("replica %d: ready at %s", self.index, url)
            while not self.stopping.wait(0.5):
                proc = server.proc
                if proc is None or proc.poll() is not None:
                    rc = None if proc is None else proc.returncode
                    log.error("replica %d: exited with code %s; restarting", self.index, rc)
                    self._state("dead", error=f"exited with code {rc}")
                    server.stop()  # its leftover processes
                    break
        if not self.stopping.is_set():
            log.error(
                "replica %d: gave up after %d starts (fleet.restarts)", self.index, self.starts
            )

    def stop(self) -> None:
        with self.lock:
            server = self.server
        if server is not None:
            server.stop()
        self._state("stopped")


def ready_urls(paths: FleetFiles, indices: range) -> list[str]:
    """The URLs of the replicas whose file says ready, by index."""
    urls = []
    for i in indices:
        try:
            data = json.loads(paths.replica(i).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("state") == "ready" and data.get("url"):
            urls.append(str(data["url"]))
    return urls


def to_publish(ready: list[str], published: list[str] | None) -> list[str]:
    """The list to publish now: the ready replicas, except that a list never empties while the
    fleet runs. The loop only goes on while one of this process's replicas is kept (started
    again after it died), so one will come back: until then the last list stays, and clients
    ride the restart out on their own limit (connection errors toward rollout.endpoint_down_s)
    rather than read "no replica" as the fleet stopped. Stopping writes the empty list."""
    return ready if ready or not published else published


def serve_fleet(cfg: Config, paths: FleetFiles, ranks: list[int], publisher: bool) -> int:
    """Run the replicas `ranks` until SIGTERM/SIGINT or the stop file; the publisher also
    writes the endpoints file. Returns the exit code."""
    paths.replicas.mkdir(parents=True, exist_ok=True)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    if publisher:
        write_endpoints(paths.endpoints, [], state="starting")
    keepers = [Keeper(cfg, paths, i, stopping) for i in ranks]
    for k in keepers:
        k.start()
    everyone = range(cfg.fleet.replicas)
    published: list[str] | None = None
    try:
        while not stopping.wait(PUBLISH_EVERY_S):
            if paths.stop.exists():
                log.info("fleet: %s exists: stopping", paths.stop)
                break
            if publisher:
                urls = to_publish(ready_urls(paths, everyone), published)
                if urls != published:
                    caps = dict.fromkeys(urls, replica_capacity(cfg))
                    write_endpoints(paths.endpoints, urls, caps, state="running")
                    log.info("fleet: publishing %d of %d replicas", len(urls), len(everyone))
                    published = urls
            if not any(k.is_alive() for k in keepers):
                log.error("fleet: no replica left running (see %s)", paths.replica_log("*"))
                return 1
    finally:
        stopping.set()
        if publisher:
            write_endpoints(paths.endpoints, [], state="stopped")
        for k in keepers:
            k.stop()
        for k in keepers:
            k.join(timeout=cfg.engine.stop_grace_s + 30)
        log.info("fleet: stopped")
    return 0

"""L2, real engine: the docs' command blocks marked `not run in tests: engine` (the fake-engine
doc test skips them) run here verbatim on a fresh copy of the checkout whose configs are as
shipped, with the real vLLM CPU engine:

- docs/engine.md: the model conversion (first: every other block serves the model it makes),
  the "N replicas" loop and the sweep balanced over its two servers (each server answered
  requests), the fleet's start / sweep / status / stop (while the fleet is up, one of the
  sweep's shards sampled again on one replica alone gives the same texts, token counts and
  rewards: balancing changes where a rollout runs, never what it is), and the single server of
  endpoint mode (the loop's command for one port: proven by the loop, not started again);
- docs/sizing.md: the pilot run, its check and the estimate for the full sweep.

A block that starts servers (a `vllm.entrypoints.openai.api_server` command) is run in its own
session and the test waits until each of its ports lists the model; the servers stay up for the
unmarked blocks that follow it (which use them) and are stopped before the next engine block.
A server command this test has already started and seen serve, word for word, is not started a
second time when no block uses it. Minutes of CPU per block: run it alone."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pandas as pd
import pytest
import yaml
from engine_helpers import MODEL, assert_gone, new_mark, require_engine
from harness.doc_commands import (
    Block,
    blocks,
    doc_env,
    doc_files,
    engine_checkout,
    run_documented,
)

from rewardprof.engine.endpoints import read_endpoints
from rewardprof.engine.host import port_is_free
from rewardprof.engine.model import MARKER, model_key
from rewardprof.engine.session import engine_session
from rewardprof.manifest.load import validate_config
from rewardprof.stages.rollout.shard_job import EngineOpener, ShardJob, run_shard
from rewardprof.store.layout import FleetLayout, RunLayout

pytestmark = [pytest.mark.engine, pytest.mark.slow]
SERVER = "vllm.entrypoints.openai.api_server"


def _is_server(command: str) -> bool:
    return SERVER in command


def _ports(command: str) -> list[int]:
    loop = re.search(r"for port in ([\d ]+);", command)
    if loop:
        return [int(p) for p in loop[1].split()]
    return [int(p) for p in re.findall(r"--port (\d+)", command)]


def _one_server_each(command: str) -> list[str]:
    """The command of each server a server block starts, words single-spaced: the loop's body
    once per port, else the command itself."""
    loop = re.fullmatch(r"for port in ([\d ]+); do (.+) & done", command.strip())
    if loop:
        return [" ".join(loop[2].replace("$port", p).split()) for p in loop[1].split()]
    return [" ".join(command.split())]


def planned_blocks() -> list[Block]:
    """What runs, in order: the block that converts the model first, then, doc by doc, every
    engine block and the unmarked blocks that follow a server block (they use its servers)."""
    plan: list[Block] = []
    for path in doc_files():
        serving = False
        for block in blocks(path):
            if not block.is_shell:
                continue
            if block.mark == "engine":
                plan.append(block)
                serving = any(_is_server(c) for c in block.commands())
            elif block.mark is None and serving:
                plan.append(block)
    return sorted(plan, key=lambda b: not any("model convert" in c for c in b.commands()))


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as reply:
        return reply.read()


def _serves_model(port: int) -> bool:
    try:
        listed = json.loads(_get(f"http://127.0.0.1:{port}/v1/models"))
    except OSError:
        return False
    return MODEL in [m["id"] for m in listed.get("data", [])]


def _requests_served(port: int) -> float:
    """vLLM's own count of requests it finished (its Prometheus /metrics)."""
    text = _get(f"http://127.0.0.1:{port}/metrics").decode()
    found = re.findall(r"^vllm:request_success_total\{[^}]*\} ([\d.e+]+)$", text, re.M)
    return sum(float(v) for v in found)


@dataclass
class Servers:
    """The servers one block left running: its session and the ports they listen on."""

    log: Path
    procs: list[subprocess.Popen] = field(default_factory=list)
    ports: list[int] = field(default_factory=list)
    served: set[str] = field(default_factory=set)  # every server command seen serving

    def start(self, command: str, work: Path, env: dict) -> None:
        ports = _ports(command)
        assert ports, f"no port in a server command: {command}"
        busy = [p for p in ports if not port_is_free("127.0.0.1", p)]
        assert not busy, f"ports {busy} are taken: the documented servers cannot start"
        with self.log.open("ab") as out:
            proc = subprocess.Popen(
                ["bash", "-c", command],
                cwd=work,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the servers a loop backgrounds stay in this group
            )
        self.procs.append(proc)
        self.ports += ports
        deadline = time.monotonic() + 1200  # two engine starts on two loaded cores
        while not all(_serves_model(p) for p in ports):
            assert time.monotonic() < deadline, f"not serving after 1200 s:\n{self.tail()}"
            assert self._alive(proc), f"the servers exited:\n{self.tail()}"
            time.sleep(2)
        self.served.update(_one_server_each(command))

    def _alive(self, proc: subprocess.Popen) -> bool:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def stop(self) -> None:
        for proc in self.procs:
            for sig, grace in ((signal.SIGTERM, 60), (signal.SIGKILL, 30)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.monotonic() + grace
                while self._alive(proc) and time.monotonic() < deadline:
                    time.sleep(0.5)
        self.procs, ports, self.ports = [], self.ports, []
        for port in ports:
            deadline = time.monotonic() + 60
            while not port_is_free("127.0.0.1", port) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert port_is_free("127.0.0.1", port), f"port {port} still bound after the stop"

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]


# the sweeps the docs run, by config file: their run's name
SWEEPS = {
    "config/examples/replicas.yaml": "replicas-demo",
    "config/examples/fleet.yaml": "fleet-demo",
    "config/examples/pilot.yaml": "pilot",
}


def _each_answered(ports: list[int]) -> None:
    """Both servers of a two-replica sweep answered requests (vLLM's own counters)."""
    served = {p: _requests_served(p) for p in ports}
    assert len(served) == 2 and all(n > 0 for n in served.values()), served


def _used(plan: list[Block], block: Block) -> bool:
    """An unmarked block follows `block` in the plan (it uses the servers `block` starts)."""
    after = plan[plan.index(block) + 1 :]
    return bool(after) and after[0].mark is None


def _check(command: str, result: subprocess.CompletedProcess, work: Path, servers: Servers):
    """What a command stands for, beyond exiting 0."""
    out = result.stdout + result.stderr
    if "model convert" in command:
        assert (work / "resources/models" / model_key(MODEL) / MARKER).is_file()
    for config, run in SWEEPS.items():
        if command.startswith("snakemake") and config in command:
            rollouts = pd.read_parquet(work / "results" / run / "rollouts.parquet")
            assert len(rollouts) and rollouts["status"].eq("ok").mean() >= 0.95, out[-3000:]
    if command.startswith("snakemake") and "replicas.yaml" in command:
        _each_answered(servers.ports)
    if command.startswith("rewardprof fleet status"):  # both replicas were up for the sweep
        assert "2 of 2 replicas published" in out, out[-2000:]
        _one_replica_gives_the_fleets_rollouts(work)
    if command.startswith("rewardprof fleet stop"):
        assert read_endpoints(work / "results/fleet-demo/fleet/endpoints.json") == []
    if command.startswith("rewardprof check"):
        assert result.stdout.startswith("ok:"), out[-2000:]
    if command.startswith("rewardprof estimate"):
        assert "no pilot data" not in out, out[-3000:]
        assert any((work / "docs/sizing").iterdir())


def _one_replica_gives_the_fleets_rollouts(work: Path) -> None:
    """The fleet sweep's shard 0 sampled again on the fleet's first replica alone: the same
    rollouts, seeded, as the sweep's balanced over both (which each answered requests)."""
    run = RunLayout(work / "results" / SWEEPS["config/examples/fleet.yaml"])
    urls = read_endpoints(FleetLayout(run).endpoints)
    _each_answered([urlsplit(url).port for url in urls])
    data = yaml.safe_load((work / "config/examples/fleet.yaml").read_text())
    engine = {k: v for k, v in data["engine"].items() if k != "endpoints_file"}
    cfg = validate_config(data | {"engine": engine | {"base_url": urls[0]}})
    tasks, alone = run.shard_tasks(0, int(data["num_shards"])), work / "one-replica.parquet"
    job = ShardJob(cfg, tasks, work / "one-replica-journal", alone, "s0of1")
    run_shard(job, EngineOpener(cfg.model_name, lambda: engine_session(cfg)))
    cols = ["task_index", "rollout_index", "seed", "completion", "reward", "completion_tokens"]
    sampled = pd.read_parquet(alone)
    assert len(sampled) >= 4 and (sampled["status"] == "ok").all()
    one = sampled[cols].sort_values(cols[:2]).reset_index(drop=True)
    swept = pd.read_parquet(run.rollouts)[cols]
    swept = swept[swept["task_index"].isin(one["task_index"])]
    assert swept.sort_values(cols[:2]).reset_index(drop=True).equals(one)


# a model conversion, three sweeps and five engine starts (~55 s each on idle cores; the
# single server of endpoint mode is the loop's command for port 8000, not started again)
@pytest.mark.timeout(5400)
def test_engine_blocks_run_verbatim(tmp_path):
    require_engine()
    plan = planned_blocks()
    # the replicas loop, its sweep, the fleet, the conversion, one server, the pilot
    assert len(plan) >= 6, [b.where for b in plan]
    work = engine_checkout(tmp_path)
    name, value, needle = new_mark()
    # every process these commands start carries the mark: none may outlive them
    env = doc_env(tmp_path) | {name: value}
    servers = Servers(tmp_path / "servers.log")
    try:
        for block in plan:
            if block.mark == "engine":
                servers.stop()
            for command in block.commands():
                where = f"{block.where}: {command}"
                if _is_server(command):
                    if set(_one_server_each(command)) <= servers.served and not _used(plan, block):
                        continue  # this very command served above; no block here uses it
                    servers.start(command, work, env)
                    continue
                result = run_documented(command, work, env, timeout=3600)
                out = result.stdout + result.stderr
                assert result.returncode == 0, f"{where} exited {result.returncode}:\n{out[-4000:]}"
                _check(command, result, work, servers)
    finally:
        servers.stop()
    assert_gone(needle, None)
    ran = "\n".join(c for b in plan for c in b.commands())
    for shown in ("for port in 8000 8001", "fleet stop", "model convert", "pilot.yaml"):
        assert shown in ran

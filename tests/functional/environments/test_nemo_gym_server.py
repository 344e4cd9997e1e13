"""nemo_gym (L1) against NeMo Gym's own resource servers: the wheel's example_session_state_mgmt
(a counter per session cookie) and example_multi_step servers run for real (uvicorn, from the
NeMo Gym environment that scripts/install-nemo-gym.sh makes), and their recorded episodes are
replayed through rewardprof's remote environment: a scripted engine serves each recorded model
turn, the server runs every tool and the verification, and every tool output and reward equals
the recorded one. Outputs are compared as JSON values: the server answers in FastAPI's compact
JSON (`{"count":42}`), which rewardprof passes on unchanged, while the recordings hold them as
`json.dumps` spaced them (`{"count": 42}`)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time

import pytest
from harness.episode_replay import derived_counter_rows, matched_cases, recorded_turns, scripted
from harness.nemo_gym_rows import rows
from helpers import REPO, require_piece

from rewardprof.environments import make_environment
from rewardprof.environments.base import VerifyContext
from rewardprof.environments.episode import run_episode

PYTHON = REPO / ".venv-nemo-gym" / "bin" / "python"
LAUNCHER = REPO / "scripts" / "nemo_gym_server.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def server(tmp_path):
    """Start the named NeMo Gym resource server; its URL once it accepts connections."""
    require_piece("NeMo Gym", PYTHON.exists(), "make install-nemo-gym")
    started = []

    def start(env: str) -> str:
        port = _free_port()
        log = (tmp_path / f"{env}.log").open("w")
        module = f"resources_servers.{env}.app"
        proc = subprocess.Popen(
            [str(PYTHON), str(LAUNCHER), module, str(port)], stdout=log, stderr=log
        )
        started.append(proc)
        deadline = time.monotonic() + 120  # imports of ~160 packages on a loaded machine
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / f"{env}.log").read_text()[-2000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return f"http://127.0.0.1:{port}"
            except OSError:
                time.sleep(0.2)
        pytest.fail(f"NeMo Gym's {env} server did not listen within 120 s")

    yield start
    for proc in started:
        proc.terminate()
        proc.wait(timeout=30)


def _replay(env, task, record):
    turns, recorded = recorded_turns(record["response"]["output"])

    async def run():
        ctx = VerifyContext(timeout_s=30)
        episode = await run_episode(scripted(turns, []), env, task, env.prompt(task), 3, ctx)
        verdict = await env.verify_episode(task, episode, ctx)
        await env.aclose()
        return episode, verdict

    episode, verdict = asyncio.run(run())
    calls = [r for t in episode.turns for r in t.results]
    got = [json.loads(r.output) for r in calls]
    return got, [json.loads(recorded[r.call.id]) for r in calls], verdict


def test_the_session_counter_server_replays_its_recordings(server):
    env = make_environment("nemo_gym", {"base_url": server("example_session_state_mgmt")})
    records = rows("example_session_state_mgmt", "example_rollouts.jsonl")
    for k, (task, record) in enumerate(zip(derived_counter_rows(records), records, strict=True)):
        got, want, verdict = _replay(env, task, record)
        assert got == want and len(got) >= 2, k  # each episode its own counter
        assert (verdict.status, verdict.reward) == ("ok", record["reward"]), verdict


def test_the_multi_step_server_replays_its_recordings(server):
    env = make_environment("nemo_gym", {"base_url": server("example_multi_step")})
    for k, (task, record) in enumerate(matched_cases("example_multi_step")):
        got, want, verdict = _replay(env, task, record)
        assert got == want, k
        assert (verdict.status, verdict.reward) == ("ok", record["reward"]), verdict
        assert verdict.extras["accuracy"] == record["accuracy"]

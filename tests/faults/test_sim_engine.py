"""The simulated engine over HTTP (in this process) and the vLLM stand-in as processes:
seeded completions repeat exactly, admission past the queue cap is a 503 with Retry-After, the
busy slot-seconds add up, and a multi-node head answers /health only once its worker joined
(and exits when the worker goes)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request

from rewardprof.engine.host import free_port, http_get_json
from rewardprof.testing.sim_batching import solves
from rewardprof.testing.sim_engine import SimEngine, SimSettings

PROMPT = "What is 20 + 22?"


def post(url: str, body: dict) -> tuple[int, dict, dict]:
    req = urllib.request.Request(
        url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.load(resp), dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc), dict(exc.headers)


def body(n: int, seed: int) -> dict:
    return {
        "model": "sim-model",
        "n": n,
        "seed": seed,
        "max_tokens": 100000,
        "messages": [{"role": "user", "content": PROMPT}],
    }


def test_seeded_samples_repeat_and_choice_j_is_seed_plus_j():
    with SimEngine(SimSettings(time_scale=10_000)) as sim:
        status, first, _ = post(sim.base_url, body(4, 7))
        assert status == 200
        _, again, _ = post(sim.base_url, body(4, 7))
        _, single, _ = post(sim.base_url, body(1, 9))
        texts = [c["message"]["content"] for c in first["choices"]]
        assert texts == [c["message"]["content"] for c in again["choices"]]
        assert texts[2] == single["choices"][0]["message"]["content"]
        for j, text in enumerate(texts):
            assert text.endswith("\\boxed{42}." if solves(PROMPT, 7 + j) else "\\boxed{43}.")
        assert first["usage"]["completion_tokens"] == sum(
            int(t.split(": ")[1].split(" ")[0]) for t in texts
        )
        stats = sim.stats()
        assert stats["requests"] == 3 and stats["sequences"] == 9
        # every sequence held a slot while it ran: busy slot-seconds >= the slowest request
        assert stats["busy_slot_s"] > 0 and stats["peak_running"] == 4


def test_past_the_queue_cap_a_request_gets_503_with_retry_after():
    # one slot and a queue of one sequence: n=2 fits (1 runs, 1 waits), n=3 would queue two
    settings = SimSettings(max_num_seqs=1, max_waiting=1, time_scale=10_000)
    with SimEngine(settings) as sim:
        status, payload, headers = post(sim.base_url, body(3, 1))
        assert status == 503 and headers.get("Retry-After") == "1", payload
        assert sim.stats()["rejected"] == 1 and sim.stats()["sequences"] == 0
        status, payload, _ = post(sim.base_url, body(2, 1))
        assert status == 200 and len(payload["choices"]) == 2
        assert sim.stats()["peak_waiting"] == 1


def _standin(*args: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "rewardprof.testing.vllm_standin", "serve", "sim-model", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait(predicate, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_the_head_serves_only_after_its_headless_worker_joined_and_exits_without_it():
    port, master = free_port("127.0.0.1"), free_port("127.0.0.1")
    shape = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(master)]
    head = _standin("--port", str(port), *shape, "--node-rank", "0")
    worker = None
    try:
        health = f"http://127.0.0.1:{port}/health"
        _wait(lambda: http_get_json(health)[0] == 503, "the head never answered /health")
        assert http_get_json(health)[0] == 503  # still alone: not ready
        worker = _standin(*shape, "--node-rank", "1", "--headless")
        _wait(lambda: http_get_json(health)[0] == 200, "the head never became ready")
        worker.kill()
        worker.wait()
        assert head.wait(timeout=60) == 1  # a node left: the replica is gone
        assert "node rank 1 left" in head.stdout.read()
    finally:
        for proc in (head, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()

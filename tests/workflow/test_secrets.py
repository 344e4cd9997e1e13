"""Secrets: the API key comes only from the environment and appears in no file the run writes:
results, logs, .snakemake metadata, the Snakemake report, the terminal output."""

from __future__ import annotations

import secrets
import shutil
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from harness import shardkit as kit
from helpers import endpoint_config, snakemake, write_config, write_jsonl

from rewardprof import cli
from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow

VAR = "REWARDPROF_TEST_API_KEY"


def _files_containing(root: Path, needle: bytes) -> list[str]:
    found, scanned = [], 0
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            scanned += 1
            if needle in path.read_bytes():
                found.append(str(path.relative_to(root)))
    assert scanned > 10  # the grep looked at a real run
    return found


def test_api_key_never_written(tmp_path):
    key = f"sk-SENTINEL-{secrets.token_hex(12)}"
    wrong = f"sk-WRONG-SENTINEL-{secrets.token_hex(12)}"
    kit.write_source(tmp_path / "data/m.jsonl", 3)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2}]
    outputs = []
    with FakeOpenAI(kit.answer, api_key=key, echo_key=True) as server:
        cfg = endpoint_config(server.base_url, entries, engine={"api_key_env": VAR})
        config = write_config(tmp_path, cfg)
        r = snakemake(tmp_path, "--configfile", str(config), env={VAR: key})
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, outputs[-1][-3000:]
        # the server insisted on the key: every request carried it
        assert server.stats["auth_ok"] >= 2 and server.stats["auth_failed"] == 0
        r = snakemake(
            tmp_path, "--report", "report.zip", "--configfile", str(config), env={VAR: key}
        )
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, outputs[-1][-3000:]
        assert (tmp_path / "report.zip").stat().st_size > 1000
        # a wrong key (which this server quotes back in its 401 body) fails before any job,
        # naming the variable, not the key
        r = snakemake(
            tmp_path, "--forcerun", "rollout", "--configfile", str(config), env={VAR: wrong}
        )
        outputs.append(r.stdout + r.stderr)
        assert r.returncode != 0
        assert f"rejected the API key from ${VAR} (HTTP 401)" in outputs[-1]
        # and inside a rollout job (the controller's check skipped) it is the same line; the
        # journal goes, so the jobs have rollouts to generate (a job with nothing to generate
        # contacts no endpoint)
        shutil.rmtree(tmp_path / "results/t/rollouts/journal")
        r = snakemake(
            tmp_path,
            "--forcerun",
            "rollout",
            "--configfile",
            str(config),
            env={VAR: wrong, "REWARDPROF_NO_PREFLIGHT": "1"},
        )
        outputs.append(r.stdout + r.stderr)
        assert r.returncode != 0
        assert f"rejected the API key from ${VAR} (HTTP 401)" in outputs[-1]
    assert (tmp_path / "results/t/profile/summary.json").exists()
    assert VAR in config.read_text()  # the config names the variable ...
    for needle in (key, wrong):  # ... and nothing holds its value
        assert _files_containing(tmp_path, needle.encode()) == []
        assert not [o for o in outputs if needle in o]
    with zipfile.ZipFile(tmp_path / "report.zip") as z:
        for name in z.namelist():
            assert key.encode() not in z.read(name), name


def test_judge_key_and_url_passwords_never_written(tmp_path):
    """A sentinel judge key (quoted by the judge in every reply, and in its 401 body when
    wrong) and sentinel passwords in engine.base_url and the judge's base_url: used by the
    run, found in no file under the working directory (results/, .snakemake/, logs), in no
    printed output and in no report."""
    tag = secrets.token_hex(8)
    judge_key, wrong_judge_key = f"sk-JUDGE-SENTINEL-{tag}", f"sk-WRONGJUDGE-SENTINEL-{tag}"
    policy_pw, judge_pw = f"pw-POLICY-SENTINEL-{tag}", f"pw-JUDGE-SENTINEL-{tag}"
    kit.write_source(tmp_path / "data/m.jsonl", 3)
    write_jsonl(
        tmp_path / "data/j.jsonl",
        [
            {"question": f"Why is the sky blue? ({i})", "reference_answer": "Rayleigh"}
            for i in range(2)
        ],
    )

    def judge_reply(prompt: str, seed: int | None) -> str:
        return f"Authorized with {judge_key}.\nVERDICT: CORRECT"

    env = {"JUDGE_KEY_VAR": judge_key, "RP_POLICY_PW": policy_pw, "RP_JUDGE_PW": judge_pw}
    outputs = []
    with (
        FakeOpenAI(kit.answer, basic_auth=("rp-user", policy_pw)) as policy,
        FakeOpenAI(judge_reply, model="judge", api_key=judge_key, echo_key=True) as judge,
    ):
        judge_options = {
            "base_url": judge.base_url.replace("http://", "http://judge-user:${RP_JUDGE_PW}@"),
            "model": "judge",
            "api_key_env": "JUDGE_KEY_VAR",
            "max_attempts": 2,
            "backoff_initial_s": 0.01,
        }
        entries = [
            {"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2},
            {
                "label": "j",
                "environment": "llm_judge",
                "source": "data/j.jsonl",
                "num_repeats": 2,
                "options": judge_options,
            },
        ]
        url = policy.base_url.replace("http://", "http://rp-user:${RP_POLICY_PW}@")
        cfg = endpoint_config(url, entries, rollout={"max_failed_fraction": 1.0})
        config = write_config(tmp_path, cfg)
        r = snakemake(tmp_path, "-p", "--configfile", str(config), env=env)
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, outputs[-1][-3000:]
        # the rollout jobs had the real password (the server insists on it) and the judge key
        assert policy.stats["auth_ok"] >= 2 and policy.stats["auth_failed"] == 0
        assert judge.stats["auth_ok"] >= 4 and judge.stats["auth_failed"] == 0
        rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
        assert rollouts["status"].eq("ok").all() and len(rollouts) == 10
        judged = rollouts[rollouts["label"] == "j"]
        # the judge's reply quoted its key: the record holds the mask instead
        assert judged["extras"].str.contains(r"Authorized with \[REDACTED\]").all()
        r = snakemake(tmp_path, "--report", "report.zip", "--configfile", str(config), env=env)
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, outputs[-1][-3000:]
        # a wrong judge key, which this judge quotes back in its 401 body: judge_error records
        r = snakemake(
            tmp_path,
            "-p",
            "--configfile",
            str(config),
            "--config",
            "run=t2",
            env=dict(env, JUDGE_KEY_VAR=wrong_judge_key),
        )
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, outputs[-1][-3000:]
        assert judge.stats["auth_failed"] >= 2
    rejected = pd.read_parquet(tmp_path / "results/t2/rollouts.parquet")
    rejected = rejected[rejected["label"] == "j"]
    assert rejected["status"].eq("judge_error").all()
    assert rejected["error"].str.contains(r"HTTP 401: .*\[REDACTED\]").all()
    # the rules' parameters carry the URLs masked (the proof that the grep below looks at them)
    assert [p for p in _files_containing(tmp_path / ".snakemake", b"***@127.0.0.1")]
    assert "${RP_POLICY_PW}" in config.read_text()  # the config names the variable ...
    for needle in (judge_key, wrong_judge_key, policy_pw, judge_pw):  # ... nothing holds a value
        assert _files_containing(tmp_path, needle.encode()) == [], needle
        assert not [o for o in outputs if needle in o], needle
    with zipfile.ZipFile(tmp_path / "report.zip") as z:
        assert len(z.namelist()) > 3
        for name in z.namelist():
            data = z.read(name)
            assert not [s for s in (judge_key, policy_pw, judge_pw) if s.encode() in data], name


def test_written_url_password_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    """A password written into engine.base_url itself (not as ${NAME}) would reach Snakemake's
    report, which copies config files whole: the workflow refuses it at parse with one line
    naming the key and what to write instead, quoting no password, writing nothing."""
    password = f"pw-LITERAL-SENTINEL-{secrets.token_hex(8)}"
    kit.write_source(tmp_path / "wd/data/m.jsonl", 2)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2}]
    cfg = endpoint_config(f"http://rp-user:{password}@127.0.0.1:9/v1", entries)
    config = write_config(tmp_path, cfg)
    # given in the config file, or on Snakemake's command line (kept in .snakemake/)
    engine = f"engine={{mode: endpoint, model: m, base_url: 'http://u:{password}@127.0.0.1:9/v1'}}"
    good = write_config(tmp_path / "wd", endpoint_config("http://127.0.0.1:9/v1", entries))
    for args in (
        ("-n", "-p", "--configfile", str(config)),
        ("--report", "report.zip", "--configfile", str(config)),
        ("-n", "--configfile", str(good), "--config", engine),
    ):
        r = snakemake(tmp_path / "wd", *args)
        assert r.returncode != 0
        refusal = [line for line in r.stderr.splitlines() if "engine.base_url" in line]
        assert len(refusal) == 1, r.stderr[-3000:]
        assert "password is written into the config" in refusal[0]
        assert "${NAME}" in refusal[0]
        assert password not in r.stdout + r.stderr
    assert not (tmp_path / "wd/results").exists() and not (tmp_path / "wd/report.zip").exists()
    written = [p for p in (tmp_path / "wd").rglob("*") if p.is_file()]
    assert not [p for p in written if password.encode() in p.read_bytes()]
    # the same file given to rewardprof: the same refusal
    monkeypatch.chdir(tmp_path / "wd")
    assert cli.main(["validate", "--config", str(config)]) != 0
    out = capsys.readouterr()
    assert "engine.base_url: the URL's password is written" in out.err
    assert password not in out.out + out.err


def test_basic_auth_quoted_by_the_server_is_never_written(tmp_path):
    """A URL password given as ${NAME}; the server quotes the Authorization header it got
    (as sent, the base64 of user:password, and decoded) in every reply and, for one task, in
    an error body every time. No file under the working directory (results/, .snakemake/,
    logs, the status files), no printed output and no `rewardprof status` holds the password,
    user:password or its base64."""
    import base64
    import subprocess
    import sys

    password = f"pw-BASIC-SENTINEL-{secrets.token_hex(8)}"
    pair = f"rp-user:{password}"
    b64 = base64.b64encode(pair.encode()).decode()
    kit.write_source(tmp_path / "data/m.jsonl", 3)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2}]
    env = {"RP_BASIC_PW": password}
    failing = kit.question(1)
    outputs = []
    with FakeOpenAI(kit.answer, basic_auth=("rp-user", password), echo_auth=True) as server:
        server.fault_fn = lambda body: "auth_echo" if failing in str(body["messages"]) else None
        url = server.base_url.replace("http://", "http://rp-user:${RP_BASIC_PW}@")
        cfg = endpoint_config(
            url, entries, num_shards=1, rollout={"max_failed_fraction": 1.0, "max_attempts": 2}
        )
        config = write_config(tmp_path, cfg)
        r = snakemake(tmp_path, "-p", "--configfile", str(config), env=env)
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, outputs[-1][-3000:]
        assert server.stats["auth_ok"] >= 2 and server.stats["auth_failed"] == 0
        assert server.stats["fault:auth_echo"] == 2
    status = subprocess.run(
        [str(Path(sys.executable).parent / "rewardprof"), "status", "results/t"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    outputs.append(status.stdout + status.stderr)
    assert status.returncode == 0, outputs[-1]
    rollouts = pd.read_parquet(tmp_path / "results/t/rollouts.parquet")
    ok = rollouts[rollouts["status"] == "ok"]
    failed = rollouts[rollouts["status"] != "ok"]
    # the replies quoted the header and the pair: what was kept holds the mask instead
    assert len(ok) == 4 and ok["completion"].str.contains(r"Basic \[REDACTED\]").all()
    assert ok["completion"].str.contains(r"decoded: \[REDACTED\]").all()
    assert len(failed) == 2 and failed["error"].str.contains(r"HTTP 500: .*\[REDACTED\]").all()
    beat = (tmp_path / "results/t/rollouts/status/0-of-1.json").read_text()
    assert "[REDACTED]" in beat  # the status file's last_error quoted the header, masked
    for needle in (password, pair, b64):
        assert _files_containing(tmp_path, needle.encode()) == [], needle
        assert not [o for o in outputs if needle in o], needle


def test_a_url_path_token_and_endpoints_file_credentials_are_never_written(tmp_path):
    """A token expanded from ${NAME} in the URL's path (a gateway's https://host/TOKEN/v1): used
    by every request, found in no file under the working directory and in no printed output.
    Then replicas from an endpoints file with user:password in their URL, the server quoting the
    Authorization header in a 500 for one task: the records hold the mask, no file the run
    wrote holds the password, the pair or its base64 (the endpoints file is the user's own,
    kept outside the working directory)."""
    import base64

    token = f"tok-PATH-SENTINEL-{secrets.token_hex(8)}"
    password = f"pw-ENDPOINTS-SENTINEL-{secrets.token_hex(8)}"
    pair = f"rp-user:{password}"
    b64 = base64.b64encode(pair.encode()).decode()
    kit.write_source(tmp_path / "data/m.jsonl", 3)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2}]
    outputs = []
    with FakeOpenAI(kit.answer) as server:
        url = server.base_url.replace("/v1", "/${RP_PATH_TOKEN}/v1")
        config = write_config(tmp_path, endpoint_config(url, entries, num_shards=1))
        r = snakemake(tmp_path, "-p", "--configfile", str(config), env={"RP_PATH_TOKEN": token})
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, outputs[-1][-3000:]
        assert server.stats[f"prefix:{token}"] >= 2  # every request went through the token
    assert "${RP_PATH_TOKEN}" in config.read_text()
    failing = kit.question(1)
    outside = tmp_path.parent / f"{tmp_path.name}-endpoints"
    outside.mkdir()
    with FakeOpenAI(kit.answer, basic_auth=("rp-user", password)) as server:
        server.fault_fn = lambda body: "auth_echo" if failing in str(body["messages"]) else None
        endpoints = outside / "endpoints.json"
        creds = server.base_url.replace("http://", f"http://{pair}@")
        endpoints.write_text(f'{{"endpoints": ["{creds}"]}}')
        cfg = endpoint_config(
            server.base_url,
            entries,
            num_shards=1,
            run="t2",
            rollout={"max_failed_fraction": 1.0, "max_attempts": 2},
        )
        cfg["engine"] = {
            "mode": "endpoint",
            "endpoints_file": str(endpoints),
            "model": "fake-model",
        }
        config = write_config(tmp_path, cfg)
        r = snakemake(tmp_path, "-p", "--configfile", str(config))
        outputs.append(r.stdout + r.stderr)
        assert r.returncode == 0, outputs[-1][-3000:]
        assert server.stats["auth_ok"] >= 2 and server.stats["fault:auth_echo"] == 2
    failed = pd.read_parquet(tmp_path / "results/t2/rollouts.parquet").query("status != 'ok'")
    assert len(failed) == 2 and failed["error"].str.contains(r"HTTP 500: .*\[REDACTED\]").all()
    for needle in (token, password, pair, b64):
        assert _files_containing(tmp_path, needle.encode()) == [], needle
        assert not [o for o in outputs if needle in o], needle

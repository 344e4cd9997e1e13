"""One redaction path for every secret the config names: the keys behind `api_key_env` (the
policy's and each judge's) and URL passwords; masked in records, log lines and printed errors,
and URL passwords kept out of what Snakemake sees."""

from __future__ import annotations

import json
import logging

import pytest

from rewardprof import cli
from rewardprof.core import redaction
from rewardprof.core.config import ConfigError
from rewardprof.core.kinds import FailureKind
from rewardprof.manifest.load import load_config, validate_config
from rewardprof.store.record import journal_record

POLICY_KEY = "sk-POLICY-SENTINEL-0123"
JUDGE_KEY = 'sk-JUDGE-"quoted"-SENTINEL-4567'
PASSWORD = "pa%40ss-SENTINEL"  # percent-encoded in the URL: "pa@ss-SENTINEL" on the wire


@pytest.fixture
def config(monkeypatch) -> dict:
    monkeypatch.setenv("POLICY_KEY_VAR", POLICY_KEY)
    monkeypatch.setenv("JUDGE_KEY_VAR", JUDGE_KEY)
    monkeypatch.setattr(redaction, "_active", ())
    judge = {
        "base_url": f"http://judge:{PASSWORD}@127.0.0.1:9/v1",
        "model": "j",
        "api_key_env": "JUDGE_KEY_VAR",
    }
    return {
        "entries": [
            {"label": "j", "environment": "llm_judge", "source": "x.jsonl", "options": judge}
        ],
        "engine": {
            "mode": "endpoint",
            "base_url": f"https://user:{PASSWORD}@example.org:8443/v1",
            "api_key_env": "POLICY_KEY_VAR",
        },
    }


def test_config_secrets_are_every_key_and_url_password(config):
    found = redaction.config_secrets(config)
    for secret in (POLICY_KEY, JUDGE_KEY, PASSWORD, "pa@ss-SENTINEL", f"user:{PASSWORD}"):
        assert secret in found
    assert "user" not in found and "judge" not in found  # user names alone are not secrets


def test_redact_masks_each_secret_also_as_json_text(config):
    redaction.install(redaction.config_secrets(config))
    text = f"401: bad key {POLICY_KEY}; body {json.dumps({'k': JUDGE_KEY})}; pw pa@ss-SENTINEL"
    clean = redaction.redact(text)
    assert "SENTINEL" not in clean
    assert clean.count(redaction.MASK) == 3


def test_rollout_record_strings_are_redacted(config):
    redaction.install(redaction.config_secrets(config))
    rec = {
        "task_index": 0,
        "rollout_index": 0,
        "status": FailureKind.JUDGE_ERROR,
        "error": f"judge rejected the request: HTTP 401: key {JUDGE_KEY!r}",
        "extras": json.dumps({"judge_reply": f"your key is {JUDGE_KEY}"}),
        "engine": f"endpoint:https://user:{PASSWORD}@example.org:8443/v1",
        "latency_s": 0.5,
    }
    clean = journal_record(rec)
    assert "SENTINEL" not in json.dumps(clean)
    assert clean["status"] == FailureKind.JUDGE_ERROR and clean["latency_s"] == 0.5


def test_a_verdict_that_does_not_fit_the_record_is_a_verifier_error():
    rec = {"task_index": 0, "rollout_index": 0, "status": "ok", "reward": True, "extras": "{}"}
    out = journal_record(rec)
    assert out["status"] == FailureKind.VERIFIER_ERROR and out["reward"] is None
    assert out["error"] == "the verdict does not fit the record: reward is bool, not a number"
    # text UTF-8 cannot hold is cleaned, not a failure (store/record.py): the verdict stands
    out = journal_record(dict(rec, reward=1.0, extras='{"x": "\ud800"}'))
    assert out["status"] == "ok" and out["reward"] == 1.0
    assert json.loads(out["extras"]) == {"x": "\ufffd"}


def test_log_lines_are_redacted(config, caplog):
    redaction.install(redaction.config_secrets(config))
    logger = logging.getLogger("rewardprof.test_redaction")
    caplog.handler.addFilter(redaction.RedactingFilter())
    logger.warning("request to %s failed with %s", config["engine"]["base_url"], POLICY_KEY)
    assert caplog.records and "SENTINEL" not in caplog.text
    assert "[REDACTED]" in caplog.text


def test_config_errors_never_quote_a_password(config):
    bad = dict(config, engine=dict(config["engine"], base_url=f"ftp://u:{PASSWORD}@h/v1"))
    with pytest.raises(ConfigError) as info:
        validate_config(bad)
    assert (
        "engine.base_url: must start with http:// or https:// (got 'ftp://[REDACTED]@h/v1')"
        in str(info.value)
    )
    assert "SENTINEL" not in str(info.value)


def test_masked_urls_round_trip_through_the_environment(config, monkeypatch):
    public, real = redaction.masked_urls(config)
    text = json.dumps(public)
    assert "SENTINEL" not in text and "user" not in text
    assert public["engine"]["base_url"] == "https://***@example.org:8443/v1"
    assert public["entries"][0]["options"]["base_url"] == "http://***@127.0.0.1:9/v1"
    # a job started without the variable says what is missing, naming no secret
    monkeypatch.delenv(redaction.URL_CREDENTIALS_ENV, raising=False)
    with pytest.raises(ConfigError, match=r"REWARDPROF_URL_CREDENTIALS does not hold it"):
        redaction.unmask_urls(public)
    monkeypatch.setenv(redaction.URL_CREDENTIALS_ENV, json.dumps(real))
    assert redaction.unmask_urls(public) == config
    assert redaction.unmask_urls(config) is config  # nothing masked: unchanged


def test_stage_command_restores_urls_and_redacts_its_errors(config, monkeypatch, capsys):
    """`rewardprof <stage> --config-json` as a rule runs it: the masked URL comes back from the
    environment, and a failure's line names no secret."""
    public, real = redaction.masked_urls(config)
    monkeypatch.setenv(redaction.URL_CREDENTIALS_ENV, json.dumps(real))
    cfg = cli._config(
        cli.build_parser().parse_args(["validate", "--config-json", json.dumps(public)])
    )
    assert cfg.engine.base_url == config["engine"]["base_url"]
    assert cfg.entries[0].options["base_url"] == config["entries"][0]["options"]["base_url"]
    # the process now masks every secret that config names
    assert "SENTINEL" not in redaction.redact(f"{POLICY_KEY} {JUDGE_KEY} {cfg.engine.base_url}")


def test_url_password_from_an_environment_variable(monkeypatch):
    """`${NAME}` in a base_url: the config file holds no password, the run uses it, and it is
    one of the secrets redaction masks."""
    monkeypatch.setattr(redaction, "_active", ())
    monkeypatch.setenv("RP_URL_PW", "p@ss/SENTINEL")
    data = {
        "entries": [{"label": "m", "environment": "math", "source": "x.jsonl"}],
        "engine": {"mode": "endpoint", "base_url": "https://u:${RP_URL_PW}@h:1/v1"},
    }
    cfg = validate_config(data)
    assert cfg.engine.base_url == "https://u:p%40ss%2FSENTINEL@h:1/v1"
    assert "p@ss/SENTINEL" in redaction.config_secrets(cfg.model_dump(mode="json"))
    monkeypatch.delenv("RP_URL_PW")
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    assert "engine.base_url: environment variable RP_URL_PW (named in the URL) is not set" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://u:written-pw@h:1/v1", True),
        ("http://u:ab${RP_PW}@h:1/v1", True),  # half written is written
        ("http://u:${RP_PW}@h:1/v1", False),
        ("http://${RP_USER}:${RP_PW}@h:1/v1", False),
        ("http://***@h:1/v1", False),  # the run directory's mask
        ("http://h:1/v1", False),
    ],
)
def test_a_url_password_must_be_named_not_written(url, refused):
    """Snakemake copies config files whole into its report: a written password is refused,
    naming the key (a judge's is inside an entry's options) and never quoting the password."""
    data = {
        "engine": {"base_url": "http://h:1/v1"},
        "entries": [{"label": "m"}, {"label": "j", "options": {"base_url": url}}],
    }
    if not refused:
        redaction.refuse_written_passwords(data)
        return
    with pytest.raises(ConfigError) as info:
        redaction.refuse_written_passwords(data, origin="c.yaml")
    message = str(info.value)
    assert message.startswith("c.yaml: entries[1].options.base_url: the URL's password is written")
    assert "${NAME}" in message and "written-pw" not in message and "\n" not in message


def test_a_config_file_with_a_written_password_does_not_load(tmp_path, monkeypatch):
    monkeypatch.setenv("RP_PW", "from-the-environment")
    p = tmp_path / "c.yaml"
    entry = {"label": "m", "environment": "math", "source": "x.jsonl"}
    engine = {"mode": "endpoint", "base_url": "https://u:SENTINEL-pw@h:1/v1"}
    p.write_text(json.dumps({"entries": [entry], "engine": engine}))
    with pytest.raises(ConfigError, match=r"c.yaml: engine.base_url: the URL's password"):
        load_config(p)
    engine["base_url"] = "https://u:${RP_PW}@h:1/v1"
    p.write_text(json.dumps({"entries": [entry], "engine": engine}))
    assert load_config(p).engine.base_url == "https://u:from-the-environment@h:1/v1"


def test_basic_auth_of_a_url_password_is_masked_in_every_form(config):
    """The Authorization header aiohttp builds from user:password@ (base64 of the decoded
    pair), the decoded pair itself, and any quoted Authorization value or Basic/Bearer
    credential, known or not."""
    import base64

    redaction.install(redaction.config_secrets(config))
    pair = "user:pa@ss-SENTINEL"
    b64 = base64.b64encode(pair.encode()).decode()
    text = f"got Authorization: Basic {b64}; decoded: {pair}; raw {b64}"
    clean = redaction.redact(text)
    assert "SENTINEL" not in clean and b64 not in clean
    unknown = base64.b64encode(b"someone:else-secret").decode()
    for quoted in (
        f"Authorization: Basic {unknown}",
        '{"authorization": "Bearer sk-unknown-0123456789abcdef"}',
        f"{{'Authorization': 'Basic {unknown}'}}",
    ):
        assert "else-secret" not in redaction.redact(quoted)
        assert unknown not in redaction.redact(quoted) and "0123456789" not in redaction.redact(
            quoted
        )
    # prose is not a credential
    prose = "a basic example; the bearer of news; Basic arithmetic"
    assert redaction.redact(prose) == prose


def test_status_file_and_status_output_hold_no_credential(tmp_path, monkeypatch, capsys):
    """The rollout job's status file (last_error quoting a server's error body) is written
    through the redaction path, and `rewardprof status`, which knows no secret, masks any
    credential an older file may quote."""
    import base64

    from rewardprof.stages.rollout.heartbeat import ShardHeartbeat
    from rewardprof.store.layout import RunLayout

    monkeypatch.setattr(redaction, "_active", ())
    redaction.install(["pw-STATUS-SENTINEL"])
    b64 = base64.b64encode(b"u:pw-STATUS-SENTINEL").decode()
    layout = RunLayout(tmp_path / "results/r")
    beat = ShardHeartbeat(layout, 0, 1, 30.0)
    beat.write(state="failed", last_error=f"HTTP 500: pw-STATUS-SENTINEL Basic {b64}")
    text = beat.path.read_text()
    assert "SENTINEL" not in text and b64 not in text and "[REDACTED]" in text
    # an older file with the credential in clear; status has no secrets installed
    monkeypatch.setattr(redaction, "_active", ())
    data = json.loads(text)
    data["last_error"] = f"HTTP 401: Authorization: Basic {b64}"
    beat.path.write_text(json.dumps(data))
    import pyarrow as pa
    import pyarrow.parquet as pq

    layout.shards_dir.mkdir(parents=True, exist_ok=True)
    shard = pa.table({"task_index": [0], "task_id": ["a"], "num_repeats": [1]})
    pq.write_table(shard, layout.shard_tasks(0, 1))
    assert cli.main(["status", str(layout.root), "--num-shards", "1"]) == 0
    out = capsys.readouterr()
    assert "Authorization: Basic [REDACTED]" in out.out  # the error is shown, masked
    assert b64 not in out.out + out.err


def _run_config(engine_url: str, judge_url: str = "http://127.0.0.1:9/v1") -> dict:
    judge = {"base_url": judge_url, "model": "j"}
    return {
        "run": "t",
        "entries": [
            {"label": "j", "environment": "llm_judge", "source": "x.jsonl", "options": judge}
        ],
        "engine": {"mode": "endpoint", "model": "p", "base_url": engine_url},
    }


def test_a_variable_anywhere_in_a_url_is_a_secret_and_never_written(tmp_path, monkeypatch):
    """`${NAME}` in a base_url's path or query (not only its password): the run's config files,
    the variable carrying masked URLs to the jobs and every redacted text hold `${NAME}` or the
    mask, never the value; a job expands it again from its environment."""
    from rewardprof.manifest.run_config import load_stage_config, secret_env, stage_config_text

    monkeypatch.setattr(redaction, "_active", ())
    monkeypatch.setenv("RP_PATH_TOKEN", "tok/PATH-SENTINEL")
    monkeypatch.setenv("RP_QUERY_TOKEN", "QUERY-SENTINEL")
    monkeypatch.setenv("RP_PW", "PW-SENTINEL")
    cfg = validate_config(
        _run_config(
            "https://u:${RP_PW}@h:1/${RP_PATH_TOKEN}/v1",
            "http://127.0.0.1:9/j/${RP_QUERY_TOKEN}/v1",
        )
    )
    assert cfg.engine.base_url == "https://u:PW-SENTINEL@h:1/tok%2FPATH-SENTINEL/v1"
    secrets = redaction.config_secrets(cfg.model_dump(mode="json"))
    for value in ("tok/PATH-SENTINEL", "tok%2FPATH-SENTINEL", "QUERY-SENTINEL", "PW-SENTINEL"):
        assert value in secrets
    redaction.install(secrets)
    said = f"HTTP 500: no route {cfg.engine.base_url} (tok/PATH-SENTINEL) {cfg.entries[0].options}"
    assert "SENTINEL" not in redaction.redact(said)
    written = {name: stage_config_text(cfg, name) for name in ("rollout", "profile", "full")}
    env = secret_env(cfg)
    assert not [n for n, text in written.items() if "SENTINEL" in text]
    assert "SENTINEL" not in json.dumps(env)
    full = json.loads(written["full"])
    assert full["engine"]["base_url"] == "https://***@h:1/${RP_PATH_TOKEN}/v1"
    assert full["entries"][0]["options"]["base_url"] == "http://127.0.0.1:9/j/${RP_QUERY_TOKEN}/v1"
    # a job: the masked URL back from the environment, each ${NAME} expanded there
    path = tmp_path / "full.json"
    path.write_text(written["full"])
    monkeypatch.setenv(redaction.URL_CREDENTIALS_ENV, env[redaction.URL_CREDENTIALS_ENV])
    again = load_stage_config(path)
    assert again.engine.base_url == cfg.engine.base_url
    assert again.entries[0].options["base_url"] == cfg.entries[0].options["base_url"]


def test_a_user_name_alone_is_a_credential(tmp_path, monkeypatch):
    """`https://TOKEN@host/v1` (a token given as the user, no password): a secret in every form
    a server may quote it (as written, decoded, Basic auth's base64), masked in config files."""
    import base64

    from rewardprof.manifest.run_config import load_stage_config, secret_env, stage_config_text

    monkeypatch.setattr(redaction, "_active", ())
    cfg = validate_config(_run_config("https://sk%2DUSER-SENTINEL@h:1/v1"))
    secrets = redaction.config_secrets(cfg.model_dump(mode="json"))
    basic = base64.b64encode(b"sk-USER-SENTINEL:").decode()
    assert {"sk%2DUSER-SENTINEL", "sk-USER-SENTINEL", basic} <= set(secrets)
    redaction.install(secrets)
    assert "SENTINEL" not in redaction.redact(f"500: sk-USER-SENTINEL {basic} {cfg.engine}")
    text = stage_config_text(cfg, "rollout")
    assert "SENTINEL" not in text and '"https://***@h:1/v1"' in text
    path = tmp_path / "rollout.json"
    path.write_text(text)
    monkeypatch.setenv(
        redaction.URL_CREDENTIALS_ENV, secret_env(cfg)[redaction.URL_CREDENTIALS_ENV]
    )
    assert load_stage_config(path).engine.base_url == cfg.engine.base_url


def test_credentials_in_an_endpoints_file_join_the_secrets_when_read(tmp_path, monkeypatch):
    from rewardprof.engine.endpoints import EndpointsFileError, read_endpoints

    monkeypatch.setattr(redaction, "_active", ())
    path = tmp_path / "endpoints.json"
    urls = ["http://fleet:EP-PW-SENTINEL@10.0.0.1:8000/v1", "http://EP-TOKEN-SENTINEL@10.0.0.2/v1"]
    said = f"HTTP 500: you sent {urls[0]} and {urls[1]}"
    assert "SENTINEL" in redaction.redact(said)  # not yet read: unknown
    path.write_text(json.dumps({"endpoints": urls}))
    assert read_endpoints(path) == urls
    assert "SENTINEL" not in redaction.redact(said)
    # a bad file's one-line error quotes no credential either
    path.write_text(json.dumps({"endpoints": [urls[0]], "capacity": {urls[0]: 0}}))
    monkeypatch.setattr(redaction, "_active", ())
    with pytest.raises(EndpointsFileError) as info:
        read_endpoints(path)
    assert "capacity['http://***@10.0.0.1:8000/v1']" in str(info.value)
    assert "SENTINEL" not in str(info.value)


def test_a_url_without_credentials_or_variables_is_written_as_it_is(monkeypatch):
    from rewardprof.manifest.run_config import secret_env, stage_config_text

    monkeypatch.setattr(redaction, "_active", ())
    cfg = validate_config(_run_config("http://10.0.0.5:8000/api/v1", "http://judge.example/v1"))
    assert redaction.url_secrets(cfg.engine.base_url) == set()
    text = stage_config_text(cfg, "full")
    assert "http://10.0.0.5:8000/api/v1" in text and "http://judge.example/v1" in text
    assert secret_env(cfg) == {} and redaction.MASK not in text
    redaction.install(redaction.config_secrets(cfg.model_dump(mode="json")))
    assert redaction.redact("POST http://10.0.0.5:8000/api/v1 failed") == (
        "POST http://10.0.0.5:8000/api/v1 failed"
    )

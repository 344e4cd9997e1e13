from __future__ import annotations

import pytest

from rewardprof.core.config import ConfigError
from rewardprof.manifest.load import load_config, validate_config

ENTRY = {"label": "m", "environment": "math", "source": "x.jsonl"}


def _err(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    return str(info.value)


def test_defaults_follow_the_public_interface():
    cfg = validate_config({"entries": [ENTRY]})
    assert cfg.run == "demo" and cfg.num_shards == 2
    e = cfg.entries[0]
    assert (e.num_repeats, e.limit, e.sample, e.seed) == (4, None, "head", 0)
    assert cfg.sampling.model_dump() == {
        "temperature": 1.0,
        "top_p": 1.0,
        "max_tokens": 1024,
        "seed": 0,
    }
    assert cfg.engine.mode == "serve" and cfg.engine.model == "builtin:smollm2-135m"
    assert cfg.model_name == "smollm2-135m"
    assert (cfg.rollout.concurrency, cfg.rollout.request_timeout_s, cfg.rollout.max_attempts) == (
        64,
        600,
        4,
    )
    assert cfg.profile.pass_at_k == [1] and cfg.profile.group_size == 8


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            {"entries": [dict(ENTRY, num_repeat=3)]},
            "entries[0].num_repeat: unknown key; did you mean num_repeats?",
        ),
        ({"entries": [ENTRY], "num_shard": 3}, "num_shard: unknown key; did you mean num_shards?"),
        (
            {"entries": [ENTRY], "sampling": {"temprature": 0.5}},
            "sampling.temprature: unknown key; did you mean temperature?",
        ),
        (
            {"entries": [dict(ENTRY, environment="mth")]},
            "unknown environment 'mth'; did you mean math?",
        ),
        (
            {"entries": [dict(ENTRY, num_repeats=0)]},
            "entries[0].num_repeats: Input should be greater",
        ),
        ({"entries": [ENTRY, ENTRY]}, "entries[1].label: duplicate label 'm'"),
        (
            {"entries": [ENTRY], "engine": {"mode": "endpoint"}},
            "engine.base_url: required when engine.mode is 'endpoint'",
        ),
        (
            {"entries": [dict(ENTRY, sample="randm")]},
            "entries[0].sample: Input should be 'head' or",
        ),
        ({"entries": []}, "entries: List should have at least 1 item"),
        (
            {
                "entries": [
                    dict(ENTRY, source={"generator": "reasoning_gym", "task": "x", "sze": 2})
                ]
            },
            "entries[0].source.sze: unknown key; did you mean size?",
        ),
    ],
)
def test_bad_keys_give_one_line_naming_the_key(data, expected):
    msg = _err(data)
    assert expected in msg
    assert "\n" not in msg


def test_load_config_names_the_file(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("entries: [\n")
    with pytest.raises(ConfigError, match=r"c\.yaml: not valid YAML"):
        load_config(p)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            {"entries": [dict(ENTRY, num_repeats="4")]},
            "entries[0].num_repeats: Input should be a valid integer (got '4')",
        ),
        (
            {"entries": [dict(ENTRY, num_repeats=True)]},
            "entries[0].num_repeats: Input should be a valid integer (got True)",
        ),
        (
            {"entries": [dict(ENTRY, num_repeats=4.0)]},
            "entries[0].num_repeats: Input should be a valid integer (got 4.0)",
        ),
        (
            {"entries": [ENTRY], "num_shards": "2"},
            "num_shards: Input should be a valid integer (got '2')",
        ),
        (
            {"entries": [dict(ENTRY, limit=False)]},
            "entries[0].limit: Input should be a valid integer (got False)",
        ),
        (
            {"entries": [ENTRY], "sampling": {"temperature": "0.5"}},
            "sampling.temperature: Input should be a valid number (got '0.5')",
        ),
        (
            {"entries": [ENTRY], "sampling": {"seed": True}},
            "sampling.seed: Input should be a valid integer (got True)",
        ),
        (
            {"entries": [ENTRY], "rollout": {"max_attempts": "3"}},
            "rollout.max_attempts: Input should be a valid integer (got '3')",
        ),
        (
            {"entries": [ENTRY], "rollout": {"request_timeout_s": True}},
            "rollout.request_timeout_s: Input should be a valid number (got True)",
        ),
        (
            {"entries": [ENTRY], "engine": {"return_token_ids": 1}},
            "engine.return_token_ids: Input should be a valid boolean (got 1)",
        ),
        (
            {"entries": [ENTRY], "export": {"drop_all_fail": "no"}},
            "export.drop_all_fail: Input should be a valid boolean (got 'no')",
        ),
        (
            {"entries": [ENTRY], "profile": {"pass_at_k": [1, True]}},
            "profile.pass_at_k[1]: Input should be a valid integer (got True)",
        ),
        (
            {"entries": [dict(ENTRY, options={"timeout_s": "5"})]},
            "entries[0].options.timeout_s: Input should be a valid number (got '5')",
        ),
    ],
)
def test_values_are_never_coerced(data, expected):
    """A string or a bool where a number is expected is an error naming the key: `true` is not
    K=1 and "4" is not 4."""
    msg = _err(data)
    assert expected in msg
    assert "\n" not in msg


def test_strict_types_still_take_what_yaml_gives(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(
        "entries: [{label: m, environment: math, source: x.jsonl, num_repeats: 3}]\n"
        "sampling: {temperature: 1, top_p: 0.9}\nexport: {target_share: {m: 2}}\n"
    )
    cfg = load_config(p)
    # an integer where a number is expected is that number
    assert (cfg.entries[0].num_repeats, cfg.sampling.temperature) == (3, 1.0)
    assert isinstance(cfg.sampling.temperature, float)
    assert cfg.export.target_share == {"m": 2.0}
    p.write_text('entries: [{label: m, environment: math, source: x.jsonl, num_repeats: "4"}]\n')
    with pytest.raises(ConfigError, match=r"c\.yaml: entries\[0\]\.num_repeats: .*valid integer"):
        load_config(p)


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        # a newline would add a line of its own to the fleet's sbatch script
        ("fleet", "sbatch_args", ["--time=60\ntouch PWNED"]),
        ("fleet", "sbatch_args", ["--partition=gpu\r#SBATCH --uid=0"]),
        ("engine", "serve_args", ["--max-num-seqs", "32\x00"]),
        ("engine", "serve_env", {"VLLM_X": "1\nexport LD_PRELOAD=/tmp/x.so"}),
        ("engine", "serve_env", {"A\tB": "1"}),
        ("engine", "model", "my/model\u2028rm -rf ~"),
        ("engine", "served_model_name", "policy\x1b[2J"),
        ("engine", "host", "0.0.0.0\x7f"),
    ],
)
def test_control_characters_never_reach_a_generated_script(section, key, value):
    message = _err({"entries": [ENTRY], section: {key: value}})
    assert f"{section}.{key}" in message and "control character U+" in message, message
    assert "\n" not in message.strip()


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("fleet", "sbatch_args", ["--time=60", "--gres=gpu:8", "--comment=a b c"]),
        ("engine", "serve_args", ["--max-num-seqs", "32", "--chat-template={{x}}"]),
        ("engine", "serve_env", {"VLLM_CPU_KVCACHE_SPACE": "1", "NAME": "ünïcode ok"}),
        ("engine", "model", "Qwen/Qwen3-8B"),
    ],
)
def test_one_line_values_pass(section, key, value):
    cfg = validate_config({"entries": [ENTRY], section: {key: value}})
    assert getattr(getattr(cfg, section), key) == value

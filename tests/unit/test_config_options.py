"""Each entry's `options` are validated with the config (validate_config, before the DAG is
built) against its environment's Options model: one line naming the key, nothing heavy
imported."""

from __future__ import annotations

import pytest

from rewardprof.core.config import ConfigError
from rewardprof.environments import BUILTIN, get_environment_class
from rewardprof.manifest.load import validate_config

JUDGE = {"base_url": "http://127.0.0.1:9/v1", "model": "judge"}
# options every built-in accepts as they are (llm_judge needs its endpoint)
MINIMAL = {name: (dict(JUDGE) if name == "llm_judge" else {}) for name in BUILTIN}
MINIMAL["nemo_gym"] = {"base_url": "http://127.0.0.1:9"}  # where its resource server is
# a key of the right name with a value of the wrong type, per environment
MISTYPED = {
    "math": ("timeout_s", "soon"),
    "mcq": ("few_shot", "sometimes"),
    "reasoning_gym": ("timeout_s", [3]),
    "code": ("memory_mb", "lots"),
    "instruction_following": ("loose", "maybe"),
    "llm_judge": ("concurrency", "many"),
    "example_multi_step": ("max_steps", "several"),
    "example_session_state_mgmt": ("max_total_tokens", -5),
    "xlam_fc": ("max_tool_output_chars", "long"),
    "math_with_code": ("max_cells", "plenty"),
    "ns_tools": ("exec_timeout_s", "a while"),
    "nemo_gym": ("request_timeout_s", "patiently"),
    "single_step_tool_use_with_argument_comparison": ("word_count_similarity_threshold", "x"),
}


def _config(env: str, options: dict) -> dict:
    """A blend whose third entry (entries[2]) is `env` with `options` (served with a tool-call
    parser, which an environment that acts needs in serve mode)."""
    plain = [{"label": f"m{i}", "environment": "math", "source": "x.jsonl"} for i in range(2)]
    entry = {"label": "e", "environment": env, "source": "x.jsonl", "options": options}
    return {"entries": [*plain, entry], "engine": {"tool_call_parser": "hermes"}}


def _error(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_every_builtin_is_covered():
    assert set(MISTYPED) == set(BUILTIN)


@pytest.mark.parametrize("env", sorted(BUILTIN))
def test_minimal_options_are_valid(env):
    assert validate_config(_config(env, MINIMAL[env])).entries[2].options == MINIMAL[env]


@pytest.mark.parametrize("env", sorted(BUILTIN))
def test_unknown_option_fails_config_validation_naming_the_key(env):
    message = _error(_config(env, {**MINIMAL[env], "colour": "blue"}))
    assert "entries[2].options.colour: unknown key; valid keys: " in message
    for key in get_environment_class(env).Options.model_fields:
        assert key in message  # the valid keys are listed


@pytest.mark.parametrize("env", sorted(BUILTIN))
def test_mistyped_option_fails_config_validation_naming_the_key(env):
    key, value = MISTYPED[env]
    message = _error(_config(env, {**MINIMAL[env], key: value}))
    assert f"entries[2].options.{key}: " in message
    assert f"(got {value!r})" in message


@pytest.mark.parametrize(
    ("env", "options", "expected"),
    [
        ("math", {"timeout_s": 0}, "entries[2].options.timeout_s: Input should be greater than 0"),
        ("reasoning_gym", {"few_shots": True}, "few_shots: unknown key; did you mean few_shot?"),
        ("code", {"cpu": 2}, "entries[2].options.cpu: unknown key; did you mean cpu_s?"),
        (
            "math",
            {"judge": {**JUDGE, "max_attempt": 2}},
            "entries[2].options.judge.max_attempt: unknown key; did you mean max_attempts?",
        ),
        (
            "llm_judge",
            {**JUDGE, "prompt_template": "{question} {answer_key}"},
            "entries[2].options.prompt_template: unknown fields ['answer_key']",
        ),
    ],
)
def test_option_errors_say_what_to_do(env, options, expected):
    assert expected in _error(_config(env, options))


def test_problems_of_several_entries_are_reported_together():
    data = _config("mcq", {"few_shot": "x"})
    data["entries"][0]["options"] = {"timeout": 1}
    message = _error(data)
    assert "entries[0].options.timeout: unknown key" in message
    assert "entries[2].options.few_shot: " in message

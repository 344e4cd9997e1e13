"""reasoning-gym as a source, the registry and entry-point mechanism, row checks."""

from __future__ import annotations

import json

import pytest
from harness.env_helpers import DATA, run

from rewardprof.core.config import GeneratorSource
from rewardprof.environments import RowError, get_environment_class, make_environment
from rewardprof.sources.generators import GeneratorError, generate_rows


def spec(**kw) -> GeneratorSource:
    return GeneratorSource(
        **{"generator": "reasoning_gym", "task": "basic_arithmetic", "size": 3, "seed": 7, **kw}
    )


def test_generated_rows_are_deterministic_json_and_valid():
    rows = list(generate_rows(spec()))
    assert len(rows) == 3
    assert rows == list(generate_rows(spec()))
    assert rows != list(generate_rows(spec(seed=8)))
    env = make_environment("reasoning_gym")
    for row in rows:
        assert json.loads(json.dumps(row)) == row
        env.check_row(row)
        content = env.prompt(row)[-1]["content"]
        assert row["question"] in content and "<answer>" in content


@pytest.mark.parametrize(
    "task", ["basic_arithmetic", "leg_counting", "spell_backward", "chain_sum"]
)
def test_generated_answer_scores_one_after_a_json_round_trip(task, ctx):
    env = make_environment("reasoning_gym")
    row = json.loads(json.dumps(next(generate_rows(spec(task=task, size=1)))))
    good = run(env.verify(row, f"<answer>{row['answer']}</answer>", ctx))
    bad = run(env.verify(row, "<answer>definitely not it</answer>", ctx))
    assert (good.status, good.reward) == ("ok", 1.0)
    assert bad.status == "ok" and bad.reward < 1.0  # some tasks give partial credit


def test_generator_config_is_passed_through():
    rows = list(generate_rows(spec(size=5, config={"min_terms": 2, "max_terms": 2})))
    assert [r["metadata"]["num_terms"] for r in rows] == [2] * 5
    default = list(generate_rows(spec(size=5)))
    assert [r["metadata"]["num_terms"] for r in default] != [2] * 5


def test_unknown_task_and_bad_config_fail_clearly():
    with pytest.raises(GeneratorError, match="unknown reasoning_gym task .no_such_task."):
        list(generate_rows(spec(task="no_such_task")))
    with pytest.raises(GeneratorError, match="bad config"):
        list(generate_rows(spec(config={"no_such_option": 1})))


def test_registry_builtins_and_unknown_names():
    assert get_environment_class("code").name == "code"
    with pytest.raises(KeyError, match="unknown environment"):
        get_environment_class("no_such_env")


@pytest.mark.parametrize(
    ("env", "row", "message"),
    [
        (
            "mcq",
            {"prompt": "q", "options": [{"A": "x"}, {"B": "y"}], "expected_answer": "E"},
            "not one of the option letters",
        ),
        ("mcq", {"prompt": "q", "options": ["x", "y"], "expected_answer": "A"}, "options"),
        ("reasoning_gym", {"question": "q", "metadata": {"source_dataset": "nope"}}, "unknown"),
        ("reasoning_gym", {"question": "q"}, "no task"),
        ("code", {"prompt": "q"}, "no tests"),
        (
            "code",
            {"prompt": "q", "verifier_metadata": {"unit_tests": {"inputs": ["1"], "outputs": []}}},
            "equal-length",
        ),
        (
            "instruction_following",
            {"prompt": "q", "instruction_id_list": ["made:up"]},
            "unknown to every registry",
        ),
        (
            "instruction_following",
            {"prompt": "q", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}, {}]},
            "one dict per",
        ),
        (
            "instruction_following",
            {
                "prompt": "q",
                "instruction_id_list": ["punctuation:no_comma"],
                "grading_mode": "half",
            },
            "grading_mode",
        ),
        ("math", {"prompt": "q"}, "expected_answer"),
    ],
)
def test_bad_rows_are_refused_at_materialize(env, row, message):
    with pytest.raises(RowError, match=message):
        make_environment(env).check_row(row)


def test_plain_rows_get_a_prompt_asking_for_the_verified_format():
    mcq = make_environment("mcq").prompt(
        {
            "question": "Capital of Italy?",
            "expected_answer": "B",
            "options": [{"A": "Paris"}, {"B": "Rome"}],
        }
    )
    assert "B: Rome" in mcq[0]["content"] and "\\boxed{" in mcq[0]["content"]
    code = make_environment("code").prompt({"question": "Sum two ints.", "tests": []})
    assert "```python" in code[0]["content"]


def test_instruction_following_loose_option(ctx):
    row = {
        "prompt": "Answer in lowercase.",
        "instruction_id_list": ["change_case:english_lowercase"],
        "kwargs": [{}],
    }
    completion = "**Note**\nall lowercase here"  # fails strict, passes with line 1 dropped
    strict = run(make_environment("instruction_following").verify(row, completion, ctx))
    loose = run(
        make_environment("instruction_following", {"loose": True}).verify(row, completion, ctx)
    )
    assert (strict.reward, loose.reward) == (0.0, 1.0)


def test_missing_nltk_data_is_a_verifier_error_naming_it(ctx):
    """Sentence counting needs NLTK's punkt_tab; nothing is downloaded at run time."""
    import nltk

    row = {
        "prompt": "Answer in at most 3 sentences.",
        "instruction_id_list": ["length_constraints:number_sentences"],
        "kwargs": [{"relation": "less than", "num_sentences": 4}],
    }
    v = run(make_environment("instruction_following").verify(row, "One. Two.", ctx))
    try:
        nltk.data.find("tokenizers/punkt_tab/english/")
    except LookupError:
        assert v.status == "verifier_error" and v.reward is None, v
        assert "punkt_tab" in v.detail
    else:  # the data is installed on this machine: the check simply runs
        assert (v.status, v.reward) == ("ok", 1.0), v


@pytest.mark.parametrize("env_name", ["math", "mcq", "instruction_following", "code", "llm_judge"])
def test_example_data_rows_are_valid_for_their_environment(env_name):
    """data/examples/<env>.jsonl (used by the default and example configs) materializes."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "data" / "examples" / f"{env_name}.jsonl"
    options = (
        {"base_url": "http://127.0.0.1:9/v1", "model": "j"} if env_name == "llm_judge" else None
    )
    env = make_environment(env_name, options)
    rows = [json.loads(line) for line in path.open()]
    assert len(rows) >= 4
    for row in rows:
        env.check_row(row)
        assert "responses_create_params" in row and env.prompt(row)[-1]["content"]


@pytest.mark.parametrize("env_name", ["mcq", "reasoning_gym"])
def test_few_shot_option_prepends_one_worked_example(env_name, ctx):
    row = next(
        json.loads(line)
        for line in (DATA / ("mcq.jsonl" if env_name == "mcq" else "reasoning_gym.jsonl")).open()
    )["row"]
    row = {
        **row,
        "responses_create_params": {
            "input": [
                {"role": "system", "content": "Be brief."},
                *row["responses_create_params"]["input"],
            ]
        },
    }
    plain = make_environment(env_name).prompt(row)
    shot = make_environment(env_name, {"few_shot": True}).prompt(row)
    assert [m["role"] for m in shot] == [
        "system",
        "user",
        "assistant",
        *[m["role"] for m in plain[1:]],
    ]
    assert shot[-1] == plain[-1] and shot[0] == plain[0]
    # the example's own answer is in exactly the format the verifier reads
    example_row = (
        row
        if env_name == "reasoning_gym"
        else {**row, "options": [{"A": "3"}, {"B": "2"}, {"C": "5"}], "expected_answer": "B"}
    )
    if env_name == "reasoning_gym":
        example_row = {
            **row,
            "question": "Calculate 2 + 3.",
            "answer": "5",
            "metadata": {"source_dataset": "basic_arithmetic", "expression": "2 + 3"},
        }
    v = run(make_environment(env_name).verify(example_row, shot[2]["content"], ctx))
    assert (v.status, v.reward) == ("ok", 1.0), v

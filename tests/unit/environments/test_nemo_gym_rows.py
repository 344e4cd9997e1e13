"""NeMo Gym rows: the verifiable_instructions registry's rules, the verifier_metadata layout,
NLTK data named before any rollout (materialize, `rewardprof validate`), mcqa rows as they are
(Parquet-struct options, strict_single_letter_boxed, output_regex)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from harness.env_helpers import run
from helpers import require_piece

from rewardprof import cli
from rewardprof.environments import RowError, make_environment
from rewardprof.environments.instruction_following import checks as instruction_checks
from rewardprof.manifest.load import validate_config
from rewardprof.sources.files import SourceError, iter_rows
from rewardprof.stages import MaterializePaths, materialize


def _if_row(ids, kwargs, prompt="Write something."):
    return {"prompt": prompt, "instruction_id_list": ids, "kwargs": kwargs}


@pytest.mark.parametrize(
    ("iid", "kwargs", "text", "followed"),
    [
        ("count:lowercase_counting", {"N": 1}, "ALL CAPS but two", False),
        ("count:lowercase_counting", {"N": 3}, "ALL CAPS but three", True),
        ("letters:letter_counting", {"N": 5, "relation": "less than"}, "abcd 123", True),
        ("letters:letter_counting", {"N": 5, "relation": "at least"}, "abcd 123", False),
        ("first_word:first_word_answer", {"first_word": "Sure"}, "sure here it is", True),
        ("first_word:first_word_answer", {"first_word": "Sure"}, "sure, here", False),
        ("last_word:last_word_answer", {"last_word": "done"}, "All is DONE.", True),
        ("paragraphs:paragraphs", {}, "one\n***\ntwo", True),
        ("paragraphs:paragraphs2", {}, "one\n\ntwo\n\nthree", False),
        ("punctuation:punctuation_dot", {}, "no dot here", True),
        ("keywords:palindrome", {}, "a racecar here", True),
        ("detectable_format:square_brackets", {}, "[a] [b] c", False),
        ("copy:copying_multiple", {"prompt_to_repeat": "Hi", "N": 2}, "hi******HI", True),
        ("keywords:word_once", {"keyword": "cat"}, "a cat and a dog", True),
        ("count:count_increment_word", {"keyword1": "x", "keyword2": "y"}, "x y y", True),
        (
            "count:counting_composition",
            {"n_sent": 1, "n_words": 4},
            "I am here.***Go on now.***We are here.",
            True,
        ),
        (
            "count:counting_composition",
            {"n_sent": 1, "n_words": 4},
            "***I am here.***Go on now.***We are here.",
            False,
        ),
    ],
)
def test_verifiable_instructions_checks(iid, kwargs, text, followed, ctx):
    if iid == "count:counting_composition":  # counts sentences: NLTK's punkt_tab
        need = instruction_checks.PUNKT
        how = "run `rewardprof install-nltk-data`"
        require_piece("NLTK's punkt_tab", instruction_checks.nltk_installed(need), how)
    env = make_environment("instruction_following")
    row = _if_row([iid], [kwargs])
    env.check_row(row)
    verdict = run(env.verify(row, text, ctx))
    assert verdict.status == "ok", verdict.detail
    assert verdict.extras["followed"] == [followed]
    assert verdict.extras["registries"] == ["verifiable_instructions"]


def test_null_kwargs_are_dropped_and_a_raising_check_is_not_followed(ctx):
    """NeMo Gym drops null kwargs; an unexpected kwarg makes the checker raise, which NeMo Gym
    scores as not followed: recorded in extras.check_errors, not a verifier_error."""
    env = make_environment("instruction_following")
    row = _if_row(
        ["count:lowercase_counting", "paragraphs:paragraphs"],
        [{"N": 50, "keyword": None}, {"num_paragraphs": 2}],
    )
    verdict = run(env.verify(row, "fine words here\n***\nmore", ctx))
    assert verdict.status == "ok" and verdict.reward == 0.0
    assert verdict.extras["followed"] == [True, False]
    (error,) = verdict.extras["check_errors"]
    assert error["index"] == 1 and "unexpected kwarg" in error["error"]


def test_a_kwarg_nemo_gym_would_draw_at_random_is_not_followed_with_the_reason(ctx):
    env = make_environment("instruction_following")
    row = _if_row(["letters:letter_counting"], [{"N": 5}])  # no relation: NeMo Gym draws one
    verdict = run(env.verify(row, "abc", ctx))
    assert (verdict.status, verdict.reward) == ("ok", 0.0)
    assert "random" in verdict.extras["check_errors"][0]["error"]


def test_unknown_id_fails_at_check_row_listing_the_known_ids():
    env = make_environment("instruction_following")
    with pytest.raises(RowError, match=r"unknown to every registry.*known: \[.*count:"):
        env.check_row(_if_row(["count:no_such_check"], [{}]))


def test_verifier_metadata_layout_wins_over_the_top_level(ctx):
    env = make_environment("instruction_following")
    row = {
        "responses_create_params": {"input": [{"role": "user", "content": "Say it."}]},
        "instruction_id_list": ["punctuation:no_comma"],
        "verifier_metadata": {
            "instruction_id_list": ["punctuation:punctuation_dot"],
            "kwargs": [None],
            "prompt": "Say it.",
        },
    }
    env.check_row(row)
    verdict = run(env.verify(row, "a, b", ctx))  # has a comma, no dot
    assert verdict.reward == 1.0 and verdict.extras["followed"] == [True]


def _missing_punkt(monkeypatch):
    real = instruction_checks.nltk_installed
    monkeypatch.setattr(
        instruction_checks, "nltk_installed", lambda r: False if r == "punkt_tab" else real(r)
    )


def _ifbench_cfg(tmp_path, **options):
    src = tmp_path / "if.jsonl"
    row = _if_row(
        ["length_constraints:number_sentences"], [{"num_sentences": 2, "relation": "at least"}]
    )
    src.write_text(json.dumps(row) + "\n")
    entry = {"label": "ifb", "environment": "ifbench", "source": str(src), "options": options}
    return validate_config({"entries": [entry]})


def test_missing_nltk_data_fails_materialize_in_one_line_naming_it(tmp_path, monkeypatch):
    _missing_punkt(monkeypatch)
    cfg = _ifbench_cfg(tmp_path)
    tasks, report = tmp_path / "tasks.parquet", tmp_path / "report.json"
    with pytest.raises(SourceError) as err:
        materialize.run(cfg, MaterializePaths(tasks=tasks, report=report))
    message = str(err.value)
    assert "\n" not in message and ":1:" in message
    assert "'punkt_tab'" in message and "`rewardprof install-nltk-data`" in message
    assert not tasks.exists() and not report.exists()  # nothing for a rollout job to start on


def test_nltk_missing_unavailable_lets_materialize_run_and_records_it(tmp_path, monkeypatch, ctx):
    _missing_punkt(monkeypatch)
    cfg = _ifbench_cfg(tmp_path, nltk_missing="unavailable")
    paths = MaterializePaths(tasks=tmp_path / "t.parquet", report=tmp_path / "r.json")
    assert materialize.run(cfg, paths)["num_tasks"] == 1
    env = make_environment("ifbench", {"nltk_missing": "unavailable"})
    row = _if_row(["length_constraints:number_sentences", "punctuation:no_comma"], [{}, {}])
    verdict = run(env.verify(row, "no comma", ctx))
    assert verdict.reward == 1.0 and verdict.extras["followed"] == [None, True]
    assert verdict.extras["unavailable"] == [
        {"index": 0, "id": "length_constraints:number_sentences", "nltk": ["punkt_tab"]}
    ]


def test_validate_lists_the_nltk_data_and_fails_on_missing(tmp_path, monkeypatch, capsys):
    _missing_punkt(monkeypatch)
    cfg = _ifbench_cfg(tmp_path)
    config = tmp_path / "c.json"
    config.write_text(json.dumps(cfg.model_dump(mode="json")))
    assert cli.main(["validate", "--config-json", config.read_text()]) != 0
    out, err = capsys.readouterr()
    assert "NLTK data 'punkt_tab' needed by length_constraints:number_sentences: NOT" in out
    assert err.count("\n") == 1 and "rewardprof install-nltk-data" in err


def test_mcqa_parquet_struct_options_are_read(tmp_path):
    """pandas writes [{"A": "x"}, {"B": "y"}] as structs with every key, padded with nulls."""
    options = [{"A": "Paris"}, {"B": "Rome"}, {"C": "Oslo"}]
    row = {"question": "Capital of Italy?", "options": options, "expected_answer": "B"}
    path = tmp_path / "mcq.parquet"
    pd.DataFrame([row]).to_parquet(path)
    entry = validate_config(
        {"entries": [{"label": "m", "environment": "mcqa", "source": str(path)}]}
    ).entries[0]
    (_, read), *_ = list(iter_rows(entry))
    assert read["options"][0] == {"A": "Paris", "B": None, "C": None}
    env = make_environment("mcqa")
    env.check_row(read)
    assert "B: Rome" in env.prompt(read)[0]["content"]


@pytest.mark.parametrize(
    ("completion", "extracted"),
    [
        ("so \\boxed{\\text{B}}", "B"),
        ("\\boxed{B: Rome}", "B"),
        ("\\boxed{Rome}", None),  # option text: strict takes letters only
        ("\\boxed{A} no wait \\boxed{(B)}", "B"),
    ],
)
def test_strict_single_letter_boxed(completion, extracted, ctx):
    row = {
        "question": "Capital of Italy?",
        "options": [{"A": "Paris"}, {"B": "Rome"}],
        "expected_answer": "B",
        "grading_mode": "strict_single_letter_boxed",
    }
    verdict = run(make_environment("mcq").verify(row, completion, ctx))
    assert verdict.extras["extracted"] == extracted
    assert verdict.reward == float(extracted == "B")


def test_output_regex_of_the_row_comes_first(ctx):
    row = {
        "question": "Capital of Italy?",
        "options": [{"A": "Paris"}, {"B": "Rome"}],
        "expected_answer": "B",
        "template_metadata": {"output_regex": r"Final Choice:\s*([A-Za-z])"},
    }
    verdict = run(make_environment("mcqa").verify(row, "\\boxed{A}\nFinal Choice: b", ctx))
    assert (verdict.reward, verdict.extras["how"]) == (1.0, "output_regex")


@pytest.mark.parametrize(
    ("ids", "kwargs", "status"),
    [
        # a NeMo Gym row (it has an id only verifiable_instructions knows): NeMo Gym's rule
        (
            ["language:response_language", "punctuation:punctuation_dot"],
            [{"language": "xx"}, {}],
            "ok",
        ),
        # an IFEval row: a checker that cannot be built is a verifier failure, not a 0
        (
            ["language:response_language", "punctuation:no_comma"],
            [{"language": "xx"}, {}],
            "verifier_error",
        ),
    ],
)
def test_a_raising_check_by_row_kind(ids, kwargs, status, ctx):
    verdict = run(make_environment("instruction_following").verify(_if_row(ids, kwargs), "hi", ctx))
    assert verdict.status == status, verdict.detail
    if status == "ok":
        assert verdict.extras["followed"] == [False, True]
        assert verdict.extras["check_errors"][0]["id"] == "language:response_language"
    else:
        assert "language:response_language" in verdict.detail and verdict.reward is None

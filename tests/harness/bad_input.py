"""The bad-input catalogue: every way a user's manifest or data can be wrong, with the one line
it must fail with. Checked in process, case by case, by tests/unit/test_bad_input_in_process.py
(the checks the Snakefile runs, called as it calls them); a few cases also go through the real
Snakefile (tests/workflow/test_bad_input.py) to prove the wiring."""

from __future__ import annotations

import json
import socket

GOOD = {"question": "What is 1 + 3?", "expected_answer": "4"}
# IFBench's words:start_verb needs NLTK's POS tagger: on a machine without it (made so below)
# the row fails at materialize, before any rollout.
NEEDS_TAGGER = {
    "prompt": "Start with a verb.",
    "instruction_id_list": ["words:start_verb"],
    "kwargs": [{"N": None}],
}


def line(row) -> bytes:
    return (json.dumps(row) + "\n").encode()


def entries(**over) -> list[dict]:
    return [
        {"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 2, **over}
    ]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bomb(levels: int) -> list:
    """Lists sharing each level: YAML writes them as anchors and aliases (a file of a few
    hundred bytes), and they expand to 10^(levels+1) values."""
    node: list = [1] * 10
    for _ in range(levels):
        node = [node] * 10
    return node


# id: (config changes, data file bytes or None, the line expected in the output)
# Config changes: a dict merged into endpoint_config's kwargs; "entries" replaces the entries.
CASES = {
    "misspelled_entry_key": (
        {
            "entries": [
                {"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeat": 2}
            ]
        },
        None,
        "entries[0].num_repeat: unknown key; did you mean num_repeats?",
    ),
    "misspelled_nested_key": (
        {"rollout": {"concurency": 2}},
        None,
        "rollout.concurency: unknown key; did you mean concurrency?",
    ),
    "unknown_top_level_key": (
        {"colour": "red"},
        None,
        "colour: unknown key; valid keys: run, num_shards, entries, sampling, engine, rollout, "
        "profile",
    ),
    "wrong_type_int": (
        {"num_shards": "two"},
        None,
        "num_shards: Input should be a valid integer (got 'two')",
    ),
    "wrong_type_float": (
        {"sampling": {"temperature": "hot"}},
        None,
        "sampling.temperature: Input should be a valid number (got 'hot')",
    ),
    "missing_source": (
        {"entries": entries(source="data/nope.jsonl")},
        None,
        "entries[0].source: data/nope.jsonl: file not found",
    ),
    "empty_source": (
        {},
        b"",
        "entries[0].source: data/m.jsonl: file is empty; entry 'm' would have no tasks",
    ),
    "blank_lines_source": (
        {},
        b"\n\n",
        "data/m.jsonl: entry 'm' has no rows (empty source); remove the entry or fix the source",
    ),
    "truncated_json_line": (
        {},
        line(GOOD) + b'{"question": "What is 2',
        "data/m.jsonl:2: malformed JSON (",
    ),
    "non_utf8_line": (
        {},
        line(GOOD) + b'{"question": "caf\xe9", "expected_answer": "1"}\n',
        "data/m.jsonl:2: not valid UTF-8 (invalid continuation byte)",
    ),
    "line_not_an_object": (
        {},
        b'["What is 1 + 3?", "4"]\n',
        "data/m.jsonl:1: expected a JSON object, got list",
    ),
    "row_missing_answer": (
        {},
        line(GOOD) + line({"question": "What is 2 + 2?"}),
        "data/m.jsonl:2: missing field(s) needed by environment 'math': ['expected_answer']",
    ),
    "row_missing_prompt": (
        {},
        line({"expected_answer": "4"}),
        "data/m.jsonl:1: no prompt: expected ",
    ),
    "row_nested_200000_deep": (
        {},
        b'{"question": "q", "expected_answer": "1", "x": '
        + b"[" * 200_000
        + b"]" * 200_000
        + b"}\n",
        "data/m.jsonl:1: row nested deeper than 64 levels",
    ),
    "empty_question": (
        {},
        line(GOOD) + line({"question": "", "expected_answer": "4"}),
        "data/m.jsonl:2: question: empty; the task would have no prompt",
    ),
    "nan_expected_answer": (
        {},
        line(GOOD) + b'{"question": "What is 2 + 2?", "expected_answer": NaN}\n',
        "data/m.jsonl:2: malformed JSON (NaN is not a JSON number)",
    ),
    "many_bad_rows_collected": (
        {},
        line(GOOD) + line({"question": "What is 2 + 2?"}) * 12,
        "data/m.jsonl: ... and 2 more bad rows",
    ),
    "source_is_a_directory": (
        {"entries": entries(source="data/dir.jsonl")},
        None,
        "entries[0].source: data/dir.jsonl: is a directory, not a JSONL or Parquet file",
    ),
    "misspelled_generator_task": (
        {
            "entries": [
                {
                    "label": "rg",
                    "environment": "reasoning_gym",
                    "source": {"generator": "reasoning_gym", "task": "basic_arithmetc", "size": 2},
                }
            ]
        },
        None,
        "entries[0].source.task: unknown reasoning_gym task 'basic_arithmetc'; did you mean "
        "basic_arithmetic?",
    ),
    "options_anchor_bomb": (
        {"entries": entries(options={"pad": bomb(9)})},
        None,
        "entries[0]: the config has more than 500000 values by here (YAML anchors and aliases "
        "count every time they repeat)",
    ),
    "unknown_environment": (
        {"entries": entries(environment="maths")},
        None,
        "entries[0].environment: unknown environment 'maths'; did you mean math?",
    ),
    "duplicate_labels": (
        {"entries": entries() + entries()},
        None,
        "entries[1].label: duplicate label 'm'",
    ),
    "num_repeats_zero": (
        {"entries": entries(num_repeats=0)},
        None,
        "entries[0].num_repeats: Input should be greater than 0 (got 0)",
    ),
    # never converted: "4" is not 4, and true is not K=1
    "num_repeats_string": (
        {"entries": entries(num_repeats="4")},
        None,
        "entries[0].num_repeats: Input should be a valid integer (got '4')",
    ),
    "num_repeats_bool": (
        {"entries": entries(num_repeats=True)},
        None,
        "entries[0].num_repeats: Input should be a valid integer (got True)",
    ),
    "num_repeats_negative": (
        {"entries": entries(num_repeats=-3)},
        None,
        "entries[0].num_repeats: Input should be greater than 0 (got -3)",
    ),
    "endpoint_down": (
        {"engine": {"base_url": "http://127.0.0.1:{port}/v1"}},
        None,
        "rewardprof: engine.base_url: http://127.0.0.1:{port}/v1/models is not reachable "
        "([Errno 111] Connection refused); start the server or fix engine.base_url",
    ),
    "api_key_variable_unset": (
        {"engine": {"api_key_env": "REWARDPROF_TEST_UNSET_KEY"}},
        None,
        "rewardprof: engine.api_key_env: environment variable REWARDPROF_TEST_UNSET_KEY is not set",
    ),
    "endpoint_serves_another_model": (
        {"engine": {"model": "other-model"}},
        None,
        "rewardprof: engine.base_url: {url}/models does not serve model 'other-model' (it "
        "serves: fake-model); set engine.served_model_name or engine.model",
    ),
    "nltk_data_missing": (
        {"entries": entries(environment="ifbench")},
        line(NEEDS_TAGGER),
        "data/m.jsonl:1: instruction words:start_verb needs NLTK data "
        "'averaged_perceptron_tagger_eng', which is not installed: install it with "
        "`rewardprof install-nltk-data`",
    ),
}

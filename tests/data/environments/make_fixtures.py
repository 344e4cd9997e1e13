"""Writes the environment fixtures (<env>.jsonl) beside this file: run it after changing a case.

Each line: {"case", "completion", "expected": {"reward", "status", "extras"?}, "row"} where `row` is
a NeMo Gym row; the first two cases of a file are the two-row fixture (accepted, rejected).
Checked-in JSONL is what the tests read; this script only documents and regenerates it.
"""

# ruff: noqa: E501 (case literals read best on one line)

import json
from pathlib import Path

from rewardprof.core.config import GeneratorSource
from rewardprof.sources.generators import generate_rows

OUT = Path(__file__).resolve().parent


def nemo(content, system=None, **fields):
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": content}
    ]
    return {"responses_create_params": {"input": msgs}, **fields}


def case(name, row, completion, reward=None, status="ok", extras=None, **more):
    c = {
        "case": name,
        "completion": completion,
        "expected": {"reward": reward, "status": status},
        "row": row,
    }
    if extras:
        c["expected"]["extras"] = extras
    c.update(more)
    return c


BOX = "Put your final answer within \\boxed{}."
m1 = nemo(f"What is 1/2 + 1/4? {BOX}", expected_answer="\\frac{3}{4}")
m2 = nemo(f"Simplify 1/sqrt(2). {BOX}", expected_answer="\\frac{\\sqrt{2}}{2}")
m3 = nemo(
    f"What is 6 times 7? {BOX}",
    expected_answer="\\(42\\)",
    agent_ref={"name": "math_with_judge_simple_agent"},
)
math = [
    case("accepted", m1, "1/2 = 2/4, so the sum is \\boxed{\\frac{3}{4}}.", 1.0),
    case("rejected", m1, "The sum is \\boxed{\\frac{1}{2}}.", 0.0),
    case(
        "nested_braces",
        m2,
        "Rationalize: \\boxed{\\frac{1}{\\sqrt{2}}}",
        1.0,
        extras={"extracted": "\\frac{1}{\\sqrt{2}}"},
    ),
    case("missing_box", m1, "The answer is 3/4.", 0.0, extras={"reason": "no_boxed_answer"}),
    case(
        "unclosed_box_uses_last_complete",
        m1,
        "First \\boxed{\\frac{3}{4}} then \\boxed{\\frac{1}{2}",
        1.0,
    ),
    case("last_box_wins", m1, "Not \\boxed{1}, it is \\boxed{0.75}", 1.0),
    case("expected_in_parens", m3, "6*7 = \\boxed{42}", 1.0),
    case(
        "trailing_period_in_box",
        m3,
        "So the product is \\boxed{42.}",
        1.0,
        extras={"extracted": "42"},
    ),
    case("empty_box", m3, "\\boxed{ }", 0.0, extras={"reason": "empty_box"}),
    case("fbox_and_spaces", m3, "\\fbox {42}", 1.0),
]

opts = [{"A": "Paris"}, {"B": "London"}, {"C": "Rome"}, {"D": "Berlin"}]
q1 = nemo(
    "Which city is the capital of Italy?\nA: Paris\nB: London\nC: Rome\nD: Berlin\n"
    "Answer with the letter of the correct option in \\boxed{}.",
    options=opts,
    expected_answer="C",
)
q2 = nemo(
    "What is 2 + 2?\nA: 3\nB: 4\nC: 5",
    metadata={"options": [{"A": "3"}, {"B": "4"}, {"C": "5"}]},
    expected_answer="B",
)
mcq = [
    case(
        "accepted",
        q1,
        "Rome is the capital of Italy. \\boxed{C}",
        1.0,
        extras={"extracted": "C", "how": "boxed"},
    ),
    case("rejected", q1, "I think it is \\boxed{A}", 0.0, extras={"extracted": "A"}),
    case("ambiguous_boxed", q1, "Either \\boxed{A, C}", 0.0, extras={"reason": "ambiguous"}),
    case("ambiguous_answer_colon", q1, "Answer: C or D", 0.0, extras={"reason": "ambiguous"}),
    case("ambiguous_letters_run", q1, "\\boxed{CD}", 0.0, extras={"reason": "ambiguous"}),
    case("answer_colon", q1, "Thinking...\nAnswer: (C)", 1.0, extras={"how": "answer_colon"}),
    case("boxed_option_text", q1, "\\boxed{\\text{Rome}}", 1.0, extras={"extracted": "C"}),
    case("option_text_last_line", q1, "The capital is\nRome", 1.0, extras={"how": "option_text"}),
    case("no_answer", q1, "I do not know.", 0.0, extras={"reason": "no_answer"}),
    case("letter_and_text", q1, "Let me think.\nC: Rome", 1.0, extras={"how": "letter_and_text"}),
    case(
        "letter_contradicts_text",
        q1,
        "The correct option is D: Rome",
        0.0,
        extras={"reason": "ambiguous"},
    ),
    case("metadata_options", q2, "2 + 2 = 4, \\boxed{B}", 1.0),
]

rows = list(
    generate_rows(
        GeneratorSource(generator="reasoning_gym", task="basic_arithmetic", size=2, seed=0)
    )
)
legs = list(
    generate_rows(GeneratorSource(generator="reasoning_gym", task="leg_counting", size=1, seed=3))
)[0]
r0 = rows[0]
rg = [
    case("accepted", r0, f"Let me compute. <answer>{r0['answer']}</answer>", 1.0),
    case("rejected", r0, "<answer>12345</answer>", 0.0),
    case("boxed_fallback", r0, f"So the result is \\boxed{{{r0['answer']}}}", 1.0),
    case(
        "last_answer_tag_wins",
        r0,
        f"<answer>1</answer> no wait <answer>{r0['answer']}</answer>",
        1.0,
    ),
    case("no_answer", r0, "I could not finish.", 0.0, extras={"reason": "no_answer"}),
    case(
        "leg_counting",
        legs,
        f"<answer>{legs['answer']}</answer>",
        1.0,
        extras={"task": "leg_counting"},
    ),
]

io = {"inputs": ["3\n1 2 3\n", "2\n10 -4\n"], "outputs": ["6\n", "6\n"]}
c1 = nemo(
    "Read n, then n integers; print their sum. Write a complete Python program in a ```python block.",
    verifier_metadata={"unit_tests": io, "problem_id": "sum"},
)
c2 = {
    "prompt": "Write a function add(a, b) returning a + b.",
    "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
}
good = "```python\nn = int(input())\nprint(sum(map(int, input().split())))\n```"
code = [
    case("accepted", c1, "Here it is:\n" + good, 1.0, extras={"passed": 2, "total": 2}),
    case(
        "rejected",
        c1,
        "```python\nn = int(input())\nprint(n)\n```",
        0.0,
        extras={"failure": "wrong_answer", "failed_test": 0},
    ),
    case("assert_tests", c2, "```python\ndef add(a, b):\n    return a + b\n```", 1.0),
    case(
        "assert_fails",
        c2,
        "```python\ndef add(a, b):\n    return a - b\n```",
        0.0,
        extras={"failure": "wrong_answer"},
    ),
    case("no_code", c1, "Just sum them up.", 0.0, extras={"reason": "no_code"}),
    case(
        "program_timeout",
        c1,
        "```python\nwhile True:\n    pass\n```",
        0.0,
        extras={"failure": "timeout"},
        options={"timeout_s": 1},
    ),
    case(
        "runtime_error",
        c1,
        "```python\nraise SystemExit(3)\n```",
        0.0,
        extras={"failure": "runtime_error"},
    ),
]

nulls = {
    "num_highlights": None,
    "relation": None,
    "num_words": None,
    "num_placeholders": None,
    "prompt_to_repeat": None,
    "num_bullets": None,
    "section_spliter": None,
    "num_sections": None,
    "capital_relation": None,
    "capital_frequency": None,
    "keywords": None,
    "num_paragraphs": None,
    "language": None,
    "let_relation": None,
    "letter": None,
    "let_frequency": None,
    "end_phrase": None,
    "forbidden_words": None,
    "keyword": None,
    "frequency": None,
    "num_sentences": None,
    "postscript_marker": None,
    "first_word": None,
    "nth_paragraph": None,
}


def kw(**set_):
    return {**nulls, **set_}


i1 = nemo(
    "Describe a sunny day in lowercase letters only and without any commas.",
    instruction_id_list=["change_case:english_lowercase", "punctuation:no_comma"],
    kwargs=[kw(), kw()],
    prompt="Describe a sunny day in lowercase letters only and without any commas.",
)
i2 = nemo(
    "Write one sentence about fruit that mentions the word apple, in fewer than 12 words.",
    instruction_id_list=["keywords:existence", "length_constraints:number_words"],
    kwargs=[kw(keywords=["apple"]), kw(relation="less than", num_words=12)],
    grading_mode="fraction",
)
ifo = [
    case(
        "accepted",
        i1,
        "the sun is warm and the sky is bright blue",
        1.0,
        extras={"followed": [True, True]},
    ),
    case(
        "rejected",
        i1,
        "The sun is warm, and the sky is blue.",
        0.0,
        extras={"followed": [False, False]},
    ),
    case(
        "binary_needs_all",
        i1,
        "the sun is warm, and the sky is blue",
        0.0,
        extras={"followed": [True, False]},
    ),
    case("fraction_all", i2, "An apple a day is sweet.", 1.0),
    case(
        "fraction_half",
        i2,
        "An apple is a round fruit that many people like to eat every single morning.",
        0.5,
        extras={"fraction": 0.5},
    ),
    case("empty_response", i1, "", 0.0),
]

j1 = nemo(
    "Explain in one sentence why the sky is blue.",
    question="Why is the sky blue?",
    reference_answer="Rayleigh scattering of sunlight by air molecules.",
)
judge = [
    case(
        "accepted",
        j1,
        "Because air molecules scatter blue light more (Rayleigh scattering).",
        1.0,
        judge_reply="The answer matches.\nVERDICT: CORRECT",
    ),
    case(
        "rejected",
        j1,
        "Because the ocean reflects onto it.",
        0.0,
        judge_reply="Wrong mechanism.\nVERDICT: INCORRECT",
    ),
    case(
        "garbage_verdict",
        j1,
        "Rayleigh scattering.",
        None,
        status="judge_error",
        judge_reply="I think it is pretty good overall!",
    ),
    case(
        "last_verdict_wins",
        j1,
        "Rayleigh.",
        1.0,
        judge_reply="VERDICT: INCORRECT? no, on reflection\nVERDICT: CORRECT",
    ),
]

for name, cases in [
    ("math", math),
    ("mcq", mcq),
    ("reasoning_gym", rg),
    ("code", code),
    ("instruction_following", ifo),
    ("llm_judge", judge),
]:
    (OUT / f"{name}.jsonl").write_text("".join(json.dumps(c) + "\n" for c in cases))
    print(name, len(cases))

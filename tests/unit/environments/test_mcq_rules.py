"""mcq's letter rule against answers dressed as right ones (negations, a letter with another
option's text, a pronoun read as an option) and the plain answers it must take (a bare letter,
"The answer is B.")."""

from __future__ import annotations

import pytest

from rewardprof.environments.mcq import extract_choice

CITIES = {"A": "Paris", "B": "London", "C": "Rome", "D": "Berlin"}
TEN = {chr(ord("A") + i): f"option {i}" for i in range(10)}  # A..J: "I" is an option


@pytest.mark.parametrize(
    ("completion", "options", "want"),
    [
        # negations name what the answer is not
        ("\\boxed{not A}", CITIES, (None, "negated")),
        ("Answer: not B", CITIES, (None, "negated")),
        ("The answer is not C.", CITIES, (None, "negated")),
        ("\\boxed{B is wrong}", CITIES, (None, "negated")),
        # a letter with another option's text
        ("\\boxed{A: London}", CITIES, (None, "contradiction")),
        ("Answer: D) Rome", CITIES, (None, "contradiction")),
        ("The correct option is D: Rome", CITIES, (None, "contradiction")),
        ("so it is\nD: Rome", CITIES, (None, "contradiction")),
        # the pronoun I is not option I
        ("Answer: I believe B", TEN, ("B", "answer_colon")),
        ("Answer: I'm sure it is C", TEN, ("C", "answer_colon")),
        ("Answer: I", TEN, ("I", "answer_colon")),
        # several letters stay ambiguous
        ("\\boxed{A, C}", CITIES, (None, "ambiguous")),
        ("Answer: A or B", CITIES, (None, "ambiguous")),
    ],
)
def test_answers_dressed_as_right_ones_are_refused(completion, options, want):
    assert extract_choice(completion, options) == want


@pytest.mark.parametrize(
    ("completion", "want"),
    [
        ("B", ("B", "bare_letter")),
        ("After some thought:\n\n(B).", ("B", "bare_letter")),
        ("The answer is B.", ("B", "answer_is")),
        ("I think the correct option is (C), Rome.", ("C", "answer_is")),
        ("The answer is C: Rome", ("C", "answer_is")),
        ("\\boxed{B: London}", ("B", "boxed")),
        ("\\boxed{\\text{C}}", ("C", "boxed")),
        ("Answer: Rome", ("C", "answer_colon")),
        ("London", ("B", "option_text")),
    ],
)
def test_plain_answers_are_read(completion, want):
    assert extract_choice(completion, CITIES) == want


def test_an_option_whose_text_says_not_is_taken_by_its_text():
    options = {"A": "Yes", "B": "Not enough information"}
    assert extract_choice("\\boxed{Not enough information}", options) == ("B", "boxed")
    assert extract_choice("Answer: B", options) == ("B", "answer_colon")

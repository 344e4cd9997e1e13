"""The extractors of model output are linear in its length (extract.py, mcq.py, math.py) and
say what their quadratic forms said: checked against those forms, kept here as references, on
random texts built from the characters that matter. Their speed on adversarial completions is
benchmarks/bench_verify_stall.py's to measure."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from rewardprof.environments.extract import last_boxed, tag_spans
from rewardprof.environments.llm_judge import without_think
from rewardprof.environments.math import boxed_answer

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\s*\{")


def quadratic_last_boxed(text: str) -> str | None:
    """The former last_boxed: a brace count from every box to its end."""
    found = None
    for m in _BOX_RE.finditer(text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            c = text[i]
            if c == "\\" and i + 1 < len(text):
                i += 2
                continue
            depth += c == "{"
            depth -= c == "}"
            i += 1
        if depth == 0:
            found = text[m.end() : i - 1]
    return found


BOX_PARTS = ["\\boxed{", "\\fbox {", "{", "}", "\\", "\\{", "\\}", "a", " ", "."]
TAG_PARTS = ["<answer>", "</answer>", "<ANSWER>", "<think>", "</think>", "x", "\n"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(BOX_PARTS), max_size=16).map("".join))
def test_last_boxed_is_the_former_scan(text):
    assert last_boxed(text) == quadratic_last_boxed(text)
    old = quadratic_last_boxed(text)
    want = None if old is None else re.sub(r"\s*\.?\s*$", "", old)
    assert boxed_answer(text) == want  # the sentence's period, as the former regex removed it


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(TAG_PARTS), max_size=12).map("".join))
def test_tag_spans_pair_tags_as_a_lazy_regex_does(text):
    spans = [text[a:b] for _, _, a, b in tag_spans(text, "answer")]
    assert spans == re.findall(r"<answer>(.*?)</answer>", text, re.S | re.I)
    assert without_think(text) == re.sub(r"<think>.*?</think>", "", text, flags=re.S | re.I)


def test_adversarial_shapes_give_their_answers():
    assert last_boxed("\\boxed{" * 4681) is None
    assert last_boxed("\\boxed{" * 4681 + "7" + "}") == "7"
    assert boxed_answer("\\boxed{" + " " * 30000 + "5 . }") == " " * 30000 + "5"
    assert tag_spans("<answer>" * 4096, "answer") == []

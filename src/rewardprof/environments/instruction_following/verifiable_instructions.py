"""NeMo Gym's `verifiable_instructions` registry: the 54 instruction ids of its
`instruction_following` environment (open-instruct's IFEval-derived training constraints, from
the `verifiable-instructions` project, which is not on PyPI), written here from its published
behaviour.

25 ids are IFEval's own (`keywords:existence`, `length_constraints:number_sentences`, ...): their
checks in that project are IFEval's, statement for statement (compared with if-verifiable 0.1.2's
IFEval module), so they run if-verifiable's IFEval checker. The 29 others (`count:*`,
`letters:*`, `first_word:*`, `last_word:*`, `paragraphs:*`, `copy:*`, ...) are implemented
below.

NeMo Gym's way of running a check, kept here: null kwargs are dropped before the checker is
built, and a checker that raises (a bad kwarg, an empty response where a word is needed) counts
as not followed. Where the original draws a missing argument at random (a row without
`num_words`, say), `evaluate` raises `ArgumentMissing` instead: the verdict would be a coin
toss, and the caller records the check as not followed with that reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rewardprof.core.errors import RewardprofError
from rewardprof.environments.instruction_following import verifiable_checks as vc

RELATIONS = vc.RELATIONS
PUNKT = "punkt_tab"


class ArgumentMissing(RewardprofError, ValueError):
    """A kwarg the check needs is absent; NeMo Gym would draw it at random."""


def _absent(value: Any) -> bool:
    return value is None


def _falsy(value: Any) -> bool:
    return not value


def _negative(value: Any) -> bool:
    return value is None or value < 0


def _bad_letter(value: Any) -> bool:
    return not value or len(value) > 1 or not ("a" <= value.lower() <= "z")


@dataclass(frozen=True)
class Spec:
    """One instruction id: the kwargs its checker takes, which of them it would otherwise draw
    at random (name -> the test that says "absent"), the NLTK data it reads, and its check
    (None: if-verifiable's IFEval checker of the same id)."""

    params: tuple[str, ...] = ()
    random_if: dict[str, Callable[[Any], bool]] = field(default_factory=dict)
    nltk: tuple[str, ...] = ()
    check: Callable[[str, dict[str, Any]], bool] | None = None


def _nth_out_of_range(args: dict[str, Any]) -> bool:
    nth, num = args.get("nth_paragraph"), args.get("num_paragraphs")
    return nth is None or nth <= 0 or (num is not None and nth > num)


_KEYWORD_FREQ = {"keyword": _falsy, "frequency": _negative, "relation": _absent}
_PROMPT = {"prompt_to_repeat": _falsy}

SPECS: dict[str, Spec] = {
    # IFEval's own checks (if-verifiable's IFEval checker runs them)
    "keywords:existence": Spec(("keywords",), {"keywords": _falsy}),
    "keywords:frequency": Spec(("keyword", "frequency", "relation"), _KEYWORD_FREQ),
    "keywords:forbidden_words": Spec(("forbidden_words",), {"forbidden_words": _falsy}),
    "keywords:letter_frequency": Spec(
        ("letter", "let_frequency", "let_relation"),
        {"letter": _bad_letter, "let_frequency": _negative, "let_relation": _absent},
    ),
    "language:response_language": Spec(("language",), {"language": _absent}),
    "length_constraints:number_sentences": Spec(
        ("num_sentences", "relation"), {"num_sentences": _negative, "relation": _absent}, (PUNKT,)
    ),
    "length_constraints:number_paragraphs": Spec(
        ("num_paragraphs",), {"num_paragraphs": _negative}
    ),
    "length_constraints:number_words": Spec(
        ("num_words", "relation"), {"num_words": _negative, "relation": _absent}
    ),
    "length_constraints:nth_paragraph_first_word": Spec(
        ("num_paragraphs", "nth_paragraph", "first_word"),
        {"num_paragraphs": _negative, "first_word": _absent},
    ),
    "detectable_content:number_placeholders": Spec(
        ("num_placeholders",), {"num_placeholders": _negative}
    ),
    "detectable_content:postscript": Spec(("postscript_marker",), {"postscript_marker": _absent}),
    "detectable_format:number_bullet_lists": Spec(("num_bullets",), {"num_bullets": _negative}),
    "detectable_format:constrained_response": Spec(),
    "detectable_format:number_highlighted_sections": Spec(
        ("num_highlights",), {"num_highlights": _negative}
    ),
    "detectable_format:multiple_sections": Spec(
        ("section_spliter", "num_sections"),
        {"section_spliter": _absent, "num_sections": _negative},
    ),
    "detectable_format:json_format": Spec(),
    "detectable_format:title": Spec(),
    "combination:two_responses": Spec(),
    "combination:repeat_prompt": Spec(("prompt_to_repeat",)),
    "startend:end_checker": Spec(("end_phrase",), {"end_phrase": _absent}),
    "change_case:capital_word_frequency": Spec(
        ("capital_frequency", "capital_relation"),
        {"capital_frequency": _absent, "capital_relation": _absent},
        (PUNKT,),
    ),
    "change_case:english_capital": Spec(),
    "change_case:english_lowercase": Spec(),
    "punctuation:no_comma": Spec(),
    "startend:quotation": Spec(),
    # the training-only checks
    "copy:repeat_phrase": Spec(
        ("phrase", "small_n"), {"phrase": _falsy, "small_n": _falsy}, check=vc.repeat_phrase
    ),
    "copy:copy": Spec(
        ("prompt_to_repeat",), check=lambda t, a: vc.same(t, vc.need(a, "prompt_to_repeat"))
    ),
    "new:copy_span_idx": Spec(
        ("prompt_to_repeat", "n_start", "n_end"),
        {"n_start": _falsy, "n_end": _falsy},
        check=lambda t, a: vc.same(t, vc.need(a, "prompt_to_repeat")[a["n_start"] : a["n_end"]]),
    ),
    "detectable_format:sentence_hyphens": Spec(check=vc.sentence_hyphens),
    "keywords:no_adjacent_consecutive": Spec(check=vc.no_adjacent_consecutive),
    "detectable_format:square_brackets": Spec(
        check=lambda t, _a: all(w.startswith("[") and w.endswith("]") for w in t.split())
    ),
    "keywords:word_once": Spec(
        ("keyword",),
        {"keyword": _falsy},
        check=lambda t, a: vc.occurrences(a["keyword"].strip(), t) == 1,
    ),
    "keywords:word_count_different_numbers": Spec(
        ("keyword", "frequency", "relation"),
        _KEYWORD_FREQ,
        check=lambda t, a: vc.compare(
            vc.occurrences(a["keyword"].strip(), t),
            vc.strict_relation(a["relation"]),
            a["frequency"],
        ),
    ),
    "keywords:exclude_word_harder": Spec(
        ("keyword", "instruction"),
        {"keyword": _falsy},
        check=lambda t, a: f" {a['keyword'].strip()} " not in t,
    ),
    "paragraphs:paragraphs": Spec(check=lambda t, _a: vc.split_paragraphs(t, r"\s?\*\*\*\s?") == 2),
    "paragraphs:paragraphs2": Spec(check=lambda t, _a: vc.split_paragraphs(t, r"\n\n") == 2),
    "first_word:first_word_sent": Spec(
        ("first_word",), {"first_word": _falsy}, check=vc.first_word_sent
    ),
    "first_word:first_word_answer": Spec(
        ("first_word",),
        {"first_word": _falsy},
        check=lambda t, a: (
            bool(t.strip()) and t.split()[0].strip().lower() == a["first_word"].strip().lower()
        ),
    ),
    "last_word:last_word_sent": Spec(
        ("last_word",), {"last_word": _falsy}, check=vc.last_word_sent
    ),
    "last_word:last_word_answer": Spec(
        ("last_word",),
        {"last_word": _falsy},
        # an empty response raises IndexError, as the original does
        check=lambda t, a: vc.strip_punct(t.split()[-1]) == a["last_word"].strip().lower(),
    ),
    "detectable_format:bigram_wrapping": Spec(check=vc.bigram_wrapping),
    "copy:copying_simple": Spec(
        ("prompt_to_repeat",), check=lambda t, a: vc.same(t, vc.need(a, "prompt_to_repeat"))
    ),
    "copy:copying_multiple": Spec(
        ("prompt_to_repeat", "N"),
        {"N": _falsy},
        check=lambda t, a: (
            len(t.split("******")) == a["N"]
            and all(vc.same(p, vc.need(a, "prompt_to_repeat")) for p in t.split("******"))
        ),
    ),
    "punctuation:punctuation_dot": Spec(check=lambda t, _a: "." not in t),
    "punctuation:punctuation_exclamation": Spec(check=lambda t, _a: "!" not in t),
    "count:lowercase_counting": Spec(
        ("N",), {"N": _falsy}, check=lambda t, a: len(re.findall(r"\b[a-z]+\b", t)) <= a["N"]
    ),
    "letters:letter_counting": Spec(
        ("N", "relation"),
        {"N": _falsy, "relation": _falsy},
        check=lambda t, a: vc.compare(len(re.findall(r"[a-zA-Z]", t)), a["relation"], a["N"]),
    ),
    "letters:letter_counting2": Spec(
        ("letter", "let_frequency", "let_relation"),
        {"letter": _bad_letter, "let_frequency": _negative, "let_relation": _absent},
        check=vc.letter_frequency,
    ),
    "count:counting_composition": Spec(
        ("n_sent", "n_words"),
        {"n_sent": _falsy, "n_words": _falsy},
        (PUNKT,),
        vc.counting_composition,
    ),
    "count:count_unique": Spec(
        nltk=(PUNKT,), check=lambda t, _a: len(w := vc.word_tokenize(t)) == len(set(w))
    ),
    "count:count_increment_word": Spec(
        ("keyword1", "keyword2"),
        {"keyword1": _falsy, "keyword2": _falsy},
        check=vc.count_increment,
    ),
    "keywords:palindrome": Spec(check=lambda t, _a: any(w == w[::-1] for w in t.split())),
    "keywords:keyword_specific_position": Spec(
        ("keyword", "n", "m"),
        {"keyword": _falsy, "n": _falsy, "m": _falsy},
        (PUNKT,),
        vc.keyword_position,
    ),
    "keywords:start_end": Spec(nltk=(PUNKT,), check=vc.start_end),
}


def nltk_resources(instruction_id: str) -> tuple[str, ...]:
    spec = SPECS.get(instruction_id)
    return spec.nltk if spec else ()


def _arguments(instruction_id: str, spec: Spec, kwargs: dict[str, Any] | None) -> dict[str, Any]:
    args = {k: v for k, v in (kwargs or {}).items() if v is not None}  # NeMo Gym drops nulls
    extra = sorted(set(args) - set(spec.params))
    if extra:  # the original's build_description() has no such keyword: a TypeError
        raise TypeError(f"unexpected kwarg(s) {extra}")
    drawn = [name for name, absent in spec.random_if.items() if absent(args.get(name))]
    if instruction_id == "length_constraints:nth_paragraph_first_word" and _nth_out_of_range(args):
        drawn.append("nth_paragraph")
    if drawn:
        raise ArgumentMissing(
            f"kwarg(s) {drawn} missing or out of range: NeMo Gym draws them at random"
        )
    return args


def evaluate(instruction_id: str, kwargs: dict[str, Any] | None, response: str) -> bool:
    """Whether `response` follows the instruction; raises where NeMo Gym's checker raises
    (the caller scores that as not followed) and ArgumentMissing where it would draw at random."""
    spec = SPECS[instruction_id]
    args = _arguments(instruction_id, spec, kwargs)
    if spec.check is not None:
        return bool(spec.check(response, args))
    from if_verifiable.ifeval.instructions_registry import (  # lazy: ~3 s, workers only
        INSTRUCTION_DICT,
    )

    checker = INSTRUCTION_DICT[instruction_id](instruction_id)
    checker.build_description(**args)
    return bool(checker.check_following(response))

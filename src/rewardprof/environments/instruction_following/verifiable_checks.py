"""The checks of NeMo Gym's `verifiable_instructions` ids that IFEval does not have, one
function per id (or shared helper): `check(response, kwargs) -> followed`, raising where the
original raises. The registry that names them is verifiable_instructions.py.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

RELATIONS = ("less than", "at least")


def util() -> Any:
    from if_verifiable.ifeval import instructions_util  # lazy: imports nltk (~1 s)

    return instructions_util


def word_tokenize(text: str) -> list[str]:
    import nltk  # lazy: only the checks that tokenize

    return nltk.word_tokenize(text)


def compare(count: int, relation: str, threshold: int) -> bool:
    if relation == RELATIONS[0]:
        return count < threshold
    if relation == RELATIONS[1]:
        return count >= threshold
    return False  # the original falls through and returns None


def strict_relation(relation: str) -> str:
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    return relation


def split_paragraphs(text: str, pattern: str) -> int | None:
    """Paragraph count, blank ends dropped; None if a blank paragraph sits in the middle."""
    parts = re.split(pattern, text)
    count = len(parts)
    for i, part in enumerate(parts):
        if not part.strip():
            if i in (0, len(parts) - 1):
                count -= 1
            else:
                return None
    return count


def occurrences(keyword: str, text: str) -> int:
    return len(re.findall(keyword, text, flags=re.IGNORECASE))


def repeat_phrase(text: str, a: dict[str, Any]) -> bool:
    phrase = a["phrase"].strip().split()
    found = re.findall(rf"{phrase[0]} .*? {phrase[-1]}", text)
    if len(found) != a["small_n"]:
        return False
    differences = 0
    for hit in found:  # every hit must differ from the phrase in exactly one word (the last one
        words = hit.split()  # decides: the original returns after its loop)
        if len(words) != len(phrase):
            return False
        differences = sum(w != p for w, p in zip(words, phrase, strict=True))
        if differences > 1:
            return False
    return differences == 1


def sentence_hyphens(text: str, _a: dict[str, Any]) -> bool:
    gold = util().split_into_sentences(re.sub("-", " ", text))
    for part, sentence in zip(text.split("-"), gold, strict=False):
        if part.strip() != part or part != sentence:
            return False
    return True


def no_adjacent_consecutive(text: str, _a: dict[str, Any]) -> bool:
    words = text.split()
    for left, right in zip(words, words[1:], strict=False):
        a, b = left[0].lower(), right[0].lower()
        if len(a) != 1 or len(b) != 1 or ord(b) - ord(a) == 1:
            return False
    return True


def first_word_sent(text: str, a: dict[str, Any]) -> bool:
    word = a["first_word"]
    if not isinstance(word, str):  # the original never stores a non-string first word
        raise TypeError("first_word must be a string")
    for sentence in util().split_into_sentences(text):
        if not sentence.strip() or sentence.split()[0].strip().lower() != word.strip().lower():
            return False
    return True


def last_word(word: Any) -> str:
    return (word if isinstance(word, str) else word[0]).strip()


def strip_punct(word: str) -> str:
    return re.sub(r"[^\w\s]", "", word.strip()).lower()


def last_word_sent(text: str, a: dict[str, Any]) -> bool:
    want = last_word(a["last_word"]).lower()
    for sentence in util().split_into_sentences(text):
        if not sentence.strip() or strip_punct(sentence.split()[-1]) != want:
            return False
    return True


def bigram_wrapping(text: str, _a: dict[str, Any]) -> bool:
    words = text.split()
    return all(
        words[i].startswith("<<") and words[i + 1].endswith(">>")
        for i in range(0, len(words) - 1, 2)
    )


def same(text: str, prompt: str) -> bool:
    return text.strip().lower() == prompt.strip().lower()


def counting_composition(text: str, a: dict[str, Any]) -> bool:
    """3 paragraphs (split on ***) of n_sent sentences of n_words tokens. A blank paragraph,
    even at either end, fails: it has no sentence (the original counts it, then checks it)."""
    parts = re.split(r"\s?\*\*\*\s?", text)
    if any(not part.strip() for part in parts):
        return False
    for part in parts:
        sentences = util().split_into_sentences(part)
        if len(sentences) != a["n_sent"]:
            return False
        if any(len(word_tokenize(s)) != a["n_words"] for s in sentences):
            return False
    return len(parts) == 3


def count_increment(text: str, a: dict[str, Any]) -> bool:
    k1, k2 = a["keyword1"].strip(), a["keyword2"].strip()
    return occurrences(k1, text) == 1 and occurrences(k2, text) == 2


def keyword_position(text: str, a: dict[str, Any]) -> bool:
    keyword = last_word(a["keyword"])
    sentences = util().split_into_sentences(text)
    if len(sentences) < a["n"]:
        return False
    words = word_tokenize(sentences[a["n"] - 1])
    return len(words) >= a["m"] and words[a["m"] - 1] == keyword


def start_end(text: str, _a: dict[str, Any]) -> bool:
    words = word_tokenize(text)
    return len(words) >= 2 and words[0].lower() == words[-1].lower()


def letter_frequency(text: str, a: dict[str, Any]) -> bool:
    count = Counter(text.lower())[a["letter"].strip().lower()]
    relation = strict_relation(a["let_relation"])
    return count < a["let_frequency"] if relation == RELATIONS[0] else count >= a["let_frequency"]


def need(args: dict[str, Any], name: str) -> Any:
    if not args.get(name):
        raise ValueError(f"{name} must be set")  # the original raises too: no random draw
    return args[name]

"""NeMo Gym `mcqa` row handling that mcq uses: its `strict_single_letter_boxed` grading, a
row's `template_metadata.output_regex`, options listed only in the prompt, and options that a
Parquet round trip turned into structs padded with nulls.

strict_single_letter_boxed: the content of the last `\\boxed{` (braces counted), `\\text{...}`
wrappers removed, must be one option letter, alone between non-letters ("E", "(B)", "[C]") or
followed by `:`, `)`, `.` or `-` ("E: text"). output_regex: the row's pattern(s), last match,
case-insensitive; a single captured letter counts even if it is not an option letter (NeMo Gym
trusts the template), else the captured text must equal one option's text.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

_LETTER_ONLY = re.compile(r"^[^A-Za-z]*([A-Z])[^A-Za-z]*$")
_LETTER_LABEL = re.compile(r"^\s*([A-Z])\s*[:).\-]")
_TEXT_WRAP = re.compile(r"\\text\{(.*)\}", re.S)  # greedy, anchored by fullmatch: linear
_PROMPT_OPTION = re.compile(r"^\s*([A-Z])\s*[:.)]\s*(\S.*?)\s*$")
# letters of other scripts and full-width forms NeMo Gym reads as A-D
_FOREIGN_LETTERS = str.maketrans(
    {"أ": " A", "ب": " B", "ج": " C", "د": " D", "অ": " A", "ব": " B", "ড": " C", "ঢ": " D"}
    | {"Ａ": " A", "Ｂ": " B", "Ｃ": " C", "Ｄ": " D"}
)


def last_boxed_raw(text: str) -> str | None:
    """Everything inside the last `\\boxed{...}` (only `\\boxed`, braces counted), or None."""
    start = text.rfind("\\boxed{")
    if start == -1:
        return None
    depth = 1
    for i in range(start + len("\\boxed{"), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + len("\\boxed{") : i]
    return None


def _unwrap(s: str) -> str:
    for _ in range(16):  # each unwrap is a pass over the text: nesting deeper is no answer
        m = _TEXT_WRAP.fullmatch(s)
        if m is None:
            break
        s = m.group(1).strip()
    return s


def strict_single_letter_boxed(text: str, letters: set[str]) -> str | None:
    inner = last_boxed_raw(text)
    if inner is None:
        return None
    inner = _unwrap(inner.strip())
    m = _LETTER_ONLY.match(inner) or _LETTER_LABEL.match(inner)
    letter = m.group(1).upper() if m else None
    return letter if letter in letters else None


def _normalize(s: str) -> str:
    return unicodedata.normalize("NFKC", s).translate(_FOREIGN_LETTERS).strip()


def output_regex_letter(text: str, patterns: Any, options: dict[str, str]) -> str | None:
    """The letter a row's template regex(es) capture, or None (then the grading mode decides)."""
    for pattern in [patterns] if isinstance(patterns, str) else list(patterns or []):
        try:
            matches = re.findall(pattern, text, re.IGNORECASE)
        except re.error:
            continue  # NeMo Gym skips a pattern that does not compile
        if not matches:
            continue
        captured = _normalize(str(matches[-1]).strip()).upper()
        if len(captured) == 1 and captured.isalpha():
            return captured
        wanted = " ".join(captured.lower().split())
        for letter, option in options.items():
            if " ".join(option.lower().split()) == wanted:
                return letter
    return None


def options_from_prompt(prompt: str) -> dict[str, str]:
    """{letter: text} from the prompt's option lines ("A: text", "B) text", ...): the last run
    of lines lettered A, B, C, ... in order; {} if there is none of two or more."""
    best: dict[str, str] = {}
    run: dict[str, str] = {}
    for line in prompt.splitlines():
        m = _PROMPT_OPTION.match(line)
        if m and ord(m.group(1)) == ord("A") + len(run):
            run[m.group(1)] = m.group(2)
            continue
        if len(run) >= 2:
            best = run
        run = {"A": m.group(2)} if m and m.group(1) == "A" else {}
    return run if len(run) >= 2 else best


def option_items(opts: Any) -> list[tuple[Any, Any]] | None:
    """(letter, text) pairs of `options` as NeMo Gym writes it ([{"A": "text"}, ...]), as a
    mapping, or as pandas writes it to Parquet (every dict has every letter, the others null)."""
    if isinstance(opts, dict):
        return list(opts.items())
    if not isinstance(opts, list) or not all(isinstance(o, dict) for o in opts):
        return None
    items = []
    for o in opts:
        present = [(k, v) for k, v in o.items() if v is not None]
        if len(present) != 1:
            return None
        items.append(present[0])
    return items

"""mcq: multiple choice; the completion's letter is compared with `expected_answer`.

Row format (NeMo Gym `mcqa` rows, or plain rows): `options`, a list of single-key dicts
`[{"A": "text"}, {"B": "text"}, ...]` (also accepted under `metadata.options`, as a mapping, or
as Parquet structs padded with nulls), and `expected_answer`, one of those letters. A row without
options takes them from its prompt's option lines ("A: text", ...; extras.options_from =
"prompt"). Plain rows may give `question` instead of a prompt; the prompt then lists the options
and asks for `\\boxed{X}`.

NeMo Gym grading (nemo_mcqa.py): a row's `template_metadata.output_regex`
is tried first; a row with `grading_mode: strict_single_letter_boxed` (or any row, with
`options.grading_mode` set to it) is graded by that rule alone. Otherwise:

extraction, first rule that finds something wins:
1. the last complete `\\boxed{...}`: a single option letter (`B`, `(B)`, `[B]`, `\\text{B}`),
   or exactly one option's text;
2. the last `Answer: ...` line: a letter, or exactly one option's text;
3. the last "the answer is B" / "the correct option is (B)" phrase;
4. the last non-empty line: exactly one option's text, or "B: text" / "B) text" where the
   text is option B's, or a bare letter ("B", "(B).").
Refused, reward 0 with the reason: several letters (`\\boxed{A, C}`, `Answer: A or B`:
"ambiguous"); a negation (`\\boxed{not A}`, `Answer: not B`, "the answer is not C":
"negated"); a letter with another option's text (`\\boxed{A: London}` when London is B:
"contradiction"). "I" as a pronoun ("Answer: I believe B") is not option I. No answer at all
is reason "no_answer".
"""

from __future__ import annotations

import re
from typing import Any, Literal

from rewardprof.environments.base import (
    Environment,
    RowError,
    Verdict,
    VerifyContext,
    extract_messages,
    has_chat_prompt,
)
from rewardprof.environments.extract import get_field, last_boxed, last_user_text
from rewardprof.environments.mcq import nemo_mcqa
from rewardprof.environments.options import FewShot

MCQ_INSTRUCTION = "Answer with the letter of the correct option in \\boxed{}, e.g. \\boxed{A}."
# options.few_shot: one worked exchange before the task, in the format the verifier reads.
FEW_SHOT = [
    {"role": "user", "content": f"What is 1 + 1?\n\nA: 3\nB: 2\nC: 5\n\n{MCQ_INSTRUCTION}"},
    {"role": "assistant", "content": "1 + 1 = 2, which is option B.\n\\boxed{B}"},
]
# Every pattern is linear in the completion's length (no quantifier can backtrack over another
# on the same characters: possessive *+, line-bounded classes), see extract.py.
_ANSWER_RE = re.compile(r"(?im)^[ \t*#>_]*+(?:final[ \t]++)?answer[ \t]*+(?:is[ \t]*+)?[:：](.*)$")
# "the answer is B", "the correct option is (C)": the last such phrase of the completion
_ANSWER_IS = re.compile(
    r"(?i)\b(?:answer|option|choice)[ \t]++is[ \t]*+:?[ \t]*+(not[ \t]++)?\(?([A-Za-z])\b(?![-'])"
)
_WRAP_RE = re.compile(r"\\(?:text|textbf|mathrm|mathbf)[ \t]*+\{([^{}]*)\}")
_LETTER_AND_TEXT = re.compile(r"(?<![A-Za-z])\(?([A-Z])[ \t]*+[:.)][ \t]++(.+)$")
_LETTER_TOKEN = re.compile(r"(?<![A-Za-z'])([A-Za-z])(?![A-Za-z'])")
_BARE_LETTER = re.compile(r"[ \t*_]*+[\(\[]?([A-Z])[\)\]]?[ \t]*+[.!]?[ \t*_]*+")
# a negated answer ("not A", "B is wrong") names what the answer is not
_NEGATION = re.compile(
    r"(?i)(?<![A-Za-z])(?:not|no|never|neither|nor|except|isn't|wasn't|cannot|can't"
    r"|incorrect|wrong|false)(?![A-Za-z])"
)
# "I" as the pronoun ("I believe B", "I'm sure"), never option I
_PRONOUN_I = re.compile(
    r"(?<![A-Za-z])I(?:'|[ \t]++(?:think|believe|guess|would|am|choose|chose|pick|select|say"
    r"|feel|conclude|suspect|reckon|will|can|must|go|prefer|answer)(?![A-Za-z]))"
)


def parse_options(row: dict[str, Any]) -> dict[str, str]:
    """`options` as an ordered {letter: text} mapping; RowError if malformed."""
    return options_and_origin(row)[0]


def options_and_origin(row: dict[str, Any]) -> tuple[dict[str, str], str]:
    """(the options, "row" or "prompt": where they came from); RowError if there are none."""
    opts = row.get("options")
    if opts is None:
        opts = get_field(row, "metadata.options")
    if opts is None and has_chat_prompt(row):
        listed = nemo_mcqa.options_from_prompt(last_user_text(extract_messages(row)))
        if listed:
            return listed, "prompt"
        raise RowError("options: none in the row, and no 'A: ...' option lines in the prompt")
    items = nemo_mcqa.option_items(opts)
    if items is None:
        raise RowError("options: expected a list of single-key dicts like [{'A': 'text'}, ...]")
    return _checked(items), "row"


def _checked(items: list[tuple[Any, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for letter, text in items:
        if not (isinstance(letter, str) and len(letter) == 1 and letter.isalpha()):
            raise RowError(f"options: keys must be single letters, got {letter!r}")
        out[letter.upper()] = str(text)
    if len(out) < 2:
        raise RowError("options: need at least two options")
    return out


def _norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s.%-]", " ", text.lower()).split()).rstrip(".")


def _match_text(candidate: str, options: dict[str, str]) -> str | None:
    """The letter whose option text equals the candidate (normalized), if exactly one does."""
    c = _norm(candidate)
    if not c:
        return None
    hits = [k for k, v in options.items() if _norm(v) == c]
    return hits[0] if len(hits) == 1 else None


def _letters_in(candidate: str, options: dict[str, str]) -> tuple[str | None, str | None]:
    """(letter, problem) for an answer span such as 'B', '(B)', 'B) Paris', 'A or C'; problem
    is ambiguous (several letters), negated ('not A') or contradiction (a letter with another
    option's text, 'A: London' when London is B); (None, None) when it names nothing."""
    s = _WRAP_RE.sub(r"\1", candidate).strip().strip("*").strip()
    m = re.fullmatch(r"[\(\[]?[ \t]*+([A-Za-z])[ \t]*+[\)\]]?[ \t]*+[.:]?", s)
    if m and m.group(1).upper() in options:
        return m.group(1).upper(), None  # "B", "(b)", "[B]", "B."
    by_text = _match_text(s, options)
    if by_text:
        return by_text, None  # exactly one option's text, even one with "not" in it
    m = re.match(r"[\(\[]?([A-Z])[\)\].:][ \t]++(\S.*)", s, re.S)
    if m and m.group(1) in options:  # "B) Paris", "B. Paris", "B: Paris"
        said = _match_text(m.group(2), options)
        if said is not None and said != m.group(1):
            return None, "contradiction"
        if said is None and _NEGATION.search(m.group(2)):
            return None, "negated"
        return m.group(1), None
    if _NEGATION.search(s):
        return None, "negated"
    if re.fullmatch(r"[A-Z]{2,}", s) and all(c in options for c in s):
        return None, "ambiguous"  # "\boxed{AC}"
    s = _PRONOUN_I.sub(" ", s)
    letters = {t for t in _LETTER_TOKEN.findall(s) if t.isupper() and t in options}
    if len(letters) > 1:
        return None, "ambiguous"  # "A or C", "A, C"
    if len(letters) == 1:
        return letters.pop(), None  # "option B"
    return None, None


def _answer_is(completion: str, options: dict[str, str]) -> tuple[str | None, str | None]:
    """The last "the answer is X" phrase: its letter, or negated ("the answer is not B")."""
    found = None
    for found in _ANSWER_IS.finditer(completion):  # noqa: B007 - the last one is wanted
        pass
    if found is None or found.group(2).upper() not in options or not found.group(2).isupper():
        return None, None
    if found.group(1):
        return None, "negated"
    rest = completion[found.end() :].split("\n", 1)[0]
    m = re.match(r"[ \t]*+\)?[ \t]*+[:.)][ \t]++(\S.*)", rest)
    said = _match_text(m.group(1), options) if m else None
    if said is not None and said != found.group(2):
        return None, "contradiction"  # "the option is D: Rome" when Rome is C
    return found.group(2), None


def extract_choice(completion: str, options: dict[str, str]) -> tuple[str | None, str]:
    """(letter, how): how is boxed | answer_colon | answer_is | option_text | letter_and_text |
    bare_letter, or ambiguous | negated | contradiction | no_answer with letter None."""
    boxed = last_boxed(completion)
    if boxed is not None:
        letter, problem = _letters_in(boxed, options)
        if problem:
            return None, problem
        if letter:
            return letter, "boxed"
    answers = _ANSWER_RE.findall(completion)
    if answers:
        letter, problem = _letters_in(answers[-1], options)
        if problem:
            return None, problem
        if letter:
            return letter, "answer_colon"
    letter, problem = _answer_is(completion, options)
    if problem or letter:
        return letter, problem or "answer_is"
    lines = [ln for ln in completion.strip().splitlines() if ln.strip()]
    if lines:
        return _last_line_choice(lines[-1], options)
    return None, "no_answer"


def _last_line_choice(line: str, options: dict[str, str]) -> tuple[str | None, str]:
    letter = _match_text(line, options)
    if letter:
        return letter, "option_text"
    # "B: London" / "... is B) London": letter and text must name the same option.
    m = _LETTER_AND_TEXT.search(line)
    if m and m.group(1) in options:
        by_text = _match_text(m.group(2), options)
        if by_text == m.group(1):
            return by_text, "letter_and_text"
        if by_text is not None:
            return None, "contradiction"  # "D: Red" when Red is C
    m = _BARE_LETTER.fullmatch(line)
    if m and m.group(1) in options:
        return m.group(1), "bare_letter"  # the whole line is "B" (or "(B).")
    return None, "no_answer"


STRICT = "strict_single_letter_boxed"


class MCQOptions(FewShot):
    """Options of the mcq environment."""

    grading_mode: Literal["rewardprof", "strict_single_letter_boxed"] = "rewardprof"
    """How rows without their own `grading_mode` are graded: rewardprof's extraction (boxed,
    `Answer:`, option text) or NeMo Gym's strict_single_letter_boxed (its mcqa default)."""


class MCQEnvironment(Environment[MCQOptions]):
    name = "mcq"
    required_fields = ("expected_answer",)
    prompt_keys = ("question",)
    few_shot_example = FEW_SHOT

    def check_row(self, row: dict[str, Any]) -> None:
        super().check_row(row)
        options = parse_options(row)
        expected = str(row["expected_answer"]).strip().upper()
        if expected not in options:
            raise RowError(
                f"expected_answer {expected!r} is not one of the option letters {''.join(options)}"
            )

    def plain_prompt(self, row: dict[str, Any]) -> str:
        listed = "\n".join(f"{k}: {v}" for k, v in parse_options(row).items())
        return f"{row['question']}\n\n{listed}\n\n{MCQ_INSTRUCTION}"

    async def verify(self, row: dict[str, Any], completion: str, ctx: VerifyContext) -> Verdict:
        options, origin = options_and_origin(row)
        expected = str(row["expected_answer"]).strip().upper()
        letter, how = await ctx.off_loop(self._extract, row, completion, options)
        extras: dict[str, Any] = {"extracted": letter}
        extras["how" if letter else "reason"] = how
        if origin == "prompt":
            extras["options_from"] = "prompt"
        return Verdict(1.0 if letter == expected else 0.0, extras=extras)

    def _extract(
        self, row: dict[str, Any], completion: str, options: dict[str, str]
    ) -> tuple[str | None, str]:
        template = row.get("template_metadata")
        if isinstance(template, dict) and template.get("output_regex"):
            letter = nemo_mcqa.output_regex_letter(
                completion.strip(), template["output_regex"], options
            )
            if letter:
                return letter, "output_regex"
        mode = row.get("grading_mode") or self.options.grading_mode
        if mode != STRICT:
            return extract_choice(completion, options)
        letter = nemo_mcqa.strict_single_letter_boxed(completion.strip(), set(options))
        return (letter, STRICT) if letter else (None, "no_answer")

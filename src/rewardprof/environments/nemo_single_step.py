"""NeMo Gym's `single_step_tool_use_with_argument_comparison`: one model turn, judged as the
action it takes.

The row's `expected_action` is a chat message, one function call or a batch of calls. The
episode's first turn is read as NeMo Gym reads a response: its calls if it made any (several
calls are a batch, matched in any order), else its text. A message is matched by any message;
a call by name and arguments compared as values: objects by their keys, lists by length and
element, floats within a tolerance, strings of two or more words by word-count overlap (the
intersection over both totals, at least `word_count_similarity_threshold`), other values by
equality. The reward is 1 when every expected call is matched (NeMo Gym's default: surplus
calls cost nothing); `category` says why not, in NeMo Gym's words.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from pydantic import NonNegativeFloat, PositiveFloat, PositiveInt

from rewardprof.environments.acting import NOT_FOUND_OUTPUT, ActingEnvironment, Episode
from rewardprof.environments.base import RowError, Verdict, VerifyContext
from rewardprof.environments.options import EpisodeOptions

NO_ACTION = "No tool call or chat message was found in the response"
NO_CALL = "No tool call was found when one was expected"
MESSAGE_OK = "A chat message was found as expected"
NO_MESSAGE = "A tool call was executed when a chat message was expected"
WRONG_TOOL = "The tool in a tool call is not the expected tool"
BAD_JSON = "An error occurred when decoding the arguments string in a tool call as a JSON object"
WRONG_TYPE = "The type of an argument value in a tool call is different than the expected type"
WRONG_KEYS = (
    "The keys in an object in an argument value in a tool call are different than the keys "
    "in the expected object"
)
WRONG_LENGTH = (
    "A list in an argument value in a tool call has a different length than the expected list"
)
WRONG_VALUE = "An argument value in a tool call is different than the expected value"
CALL_OK = "A tool call that matches the expected tool call was found"
BATCH_OK = "A tool-call batch that matches the expected tool calls was found"


class SingleStepOptions(EpisodeOptions):
    max_steps: PositiveInt = 1
    """Most model turns of one episode: one, as NeMo Gym judges this task on one response."""
    word_count_similarity_threshold: NonNegativeFloat = 0.1
    """Least word-count overlap of two strings of two or more words (NeMo Gym's config: 0.1)."""
    floating_point_comparison_threshold: PositiveFloat = 1e-6
    """Largest difference of two floats taken as equal."""


def _values_match(want: Any, got: Any, words: float, tol: float) -> str | None:
    """None when `got` matches `want`, else the category saying why not."""
    if not isinstance(got, type(want)):
        return WRONG_TYPE
    if isinstance(want, dict):
        if set(want) != set(got):
            return WRONG_KEYS
        return next((c for k in want if (c := _values_match(want[k], got[k], words, tol))), None)
    if isinstance(want, list):
        if len(want) != len(got):
            return WRONG_LENGTH
        pairs = zip(want, got, strict=True)
        return next((c for w, g in pairs if (c := _values_match(w, g, words, tol))), None)
    if isinstance(want, float):
        return None if abs(got - want) < tol else WRONG_VALUE
    if isinstance(want, str):
        a, b = Counter(want.strip().lower().split()), Counter(got.strip().lower().split())
        if a.total() < 2 or b.total() < 2:
            return None if want == got else WRONG_VALUE
        return None if (a & b).total() / (a.total() + b.total()) >= words else WRONG_VALUE
    return None if want == got else WRONG_VALUE


def compare_call(want: dict, got: dict, words: float, tol: float) -> str | None:
    if want["name"] != got["name"]:
        return WRONG_TOOL
    try:
        arguments = json.loads(got["arguments"])
    except ValueError:
        return BAD_JSON
    return _values_match(json.loads(want["arguments"]), arguments, words, tol)


def _matching(candidates: list[list[int]]) -> dict[int, int]:
    """Maximum matching of expected calls to actual ones (augmenting paths): a fuzzy match
    can fit several expected calls, so greedy pairing could strand one."""
    matched: dict[int, int] = {}

    def augment(e: int, seen: set[int]) -> bool:
        for a in candidates[e]:
            if a not in seen:
                seen.add(a)
                if a not in matched or augment(matched[a], seen):
                    matched[a] = e
                    return True
        return False

    for e in sorted(range(len(candidates)), key=lambda i: len(candidates[i])):
        augment(e, set())
    return matched


def compare_calls(expected: list[dict], actual: list[dict], words: float, tol: float):
    """(reward, category) of `actual` calls against `expected` ones, in any order."""
    if len(expected) == len(actual) == 1:
        why = compare_call(expected[0], actual[0], words, tol)
        return (0.0, why) if why else (1.0, CALL_OK)
    whys = [[compare_call(e, a, words, tol) for a in actual] for e in expected]
    matched = _matching([[i for i, w in enumerate(row) if w is None] for row in whys])
    if len(matched) == len(expected):
        return 1.0, CALL_OK if len(expected) == 1 else BATCH_OK
    missed = next(e for e in range(len(expected)) if e not in matched.values())
    near = [w for w in whys[missed] if w not in (None, WRONG_TOOL)]
    return 0.0, near[0] if near else WRONG_TOOL


def judge_action(
    expected: dict, content: str | None, calls: list[dict], words: float, tol: float
) -> tuple[float, str]:
    """(reward, category) of a response's text and calls against the expected action."""
    if expected["type"] == "message":
        if calls:
            return 0.0, NO_MESSAGE
        return (1.0, MESSAGE_OK) if content is not None else (0.0, NO_ACTION)
    if not calls:
        return (0.0, NO_CALL) if content is not None else (0.0, NO_ACTION)
    wanted = expected["calls"] if expected["type"] == "function_call_batch" else [expected]
    return compare_calls(wanted, calls, words, tol)


class SingleStepToolUseEnvironment(ActingEnvironment[SingleStepOptions]):
    name = "single_step_tool_use_with_argument_comparison"
    required_fields = ("expected_action",)

    def check_row(self, row: dict[str, Any]) -> None:
        super().check_row(row)
        action = row["expected_action"]
        kind = action.get("type") if isinstance(action, dict) else None
        if kind not in ("message", "function_call", "function_call_batch"):
            raise RowError(
                "expected_action.type: expected message, function_call or function_call_batch"
            )

    def call(
        self, name: str, arguments: dict[str, Any], state: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        return NOT_FOUND_OUTPUT, state  # judged on the action; no tool has an implementation

    async def verify_episode(
        self, row: dict[str, Any], episode: Episode, ctx: VerifyContext
    ) -> Verdict:
        first = episode.turns[0] if episode.turns else None
        content = first.content if first else None
        calls = [{"name": c.name, "arguments": c.arguments} for c in (first.calls if first else [])]
        reward, category = await ctx.run_in_pool(
            judge_action,
            row["expected_action"],
            content,
            calls,
            self.options.word_count_similarity_threshold,
            self.options.floating_point_comparison_threshold,
        )
        return Verdict(reward=reward, extras={"category": category})

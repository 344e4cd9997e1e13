"""check's episode invariant (tools/check_episodes.py): a scored episode's summary and its
trajectory agree, turn for turn and call for call."""

from __future__ import annotations

import copy

import pytest

from rewardprof.tools.check_episodes import acting_labels, episode_problem


def _call(i):
    return {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}


WHOLE = {
    "episode": {
        "steps": 2,
        "tool_calls": 2,
        "tool_errors": 1,
        "stop_reason": "no_call",
        "prompt_messages": 1,
    },
    "trajectory": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [_call(0), _call(1)]},
        {"role": "tool", "tool_call_id": "c0", "content": "1"},
        {"role": "tool", "tool_call_id": "c1", "content": "{}"},
        {"role": "assistant", "content": "done"},
    ],
}


def _broken(change):
    extras = copy.deepcopy(WHOLE)
    change(extras)
    return episode_problem(extras)


def test_a_whole_episode_passes():
    assert episode_problem(WHOLE) is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda e: e.pop("trajectory"), "no episode summary or trajectory"),
        (lambda e: e["trajectory"].pop(3), "1 tool outputs, the summary 2 and 2"),
        (lambda e: e["trajectory"].pop(), "1 model turns"),
        (lambda e: e["trajectory"][2].update(tool_call_id="c9"), "answers no call ('c9')"),
        (lambda e: e["episode"].update(stop_reason="bored"), "unknown stop reason 'bored'"),
        (lambda e: e["episode"].update(tool_errors=3), "impossible"),
        (lambda e: e["episode"].update(steps="2"), "not integers"),
        (lambda e: e["episode"].update(prompt_messages=2), "1 model turns and 2 tool outputs"),
        (lambda e: e["episode"].update(prompt_messages=9), "impossible"),
    ],
)
def test_a_summary_that_disagrees_with_its_trajectory_is_named(change, says):
    assert says in _broken(change)


def test_the_labels_that_act_come_from_the_materialize_report():
    report = {
        "entries": [
            {"label": "m", "environment": "math"},
            {"label": "c", "environment": "example_session_state_mgmt"},
            {"label": "x", "environment": "xlam_fc"},
        ]
    }
    assert acting_labels(report) == ["c", "x"]

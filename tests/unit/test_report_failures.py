"""failures.png: bars on an axis from 0 when something failed or was truncated; a figure that
says there is nothing to show, without an axis, when nothing was."""

from __future__ import annotations

import pytest

from rewardprof.stages.report import _failure_figure  # the figure before it is saved


def _label(name, failed_by_kind, truncation_rate, expected=40):
    return {
        "label": name,
        "failed_by_kind": failed_by_kind,
        "truncation_rate": truncation_rate,
        "expected_rollouts": expected,
    }


def test_no_failures_and_no_truncation_draw_no_axis():
    fig = _failure_figure([_label("a", {}, 0.0), _label("b", {"timeout": 0}, None)])
    (ax,) = fig.axes
    assert not ax.axison
    assert [t.get_text() for t in ax.texts] == [
        "No failed or truncated rollouts (80 rollouts, 2 labels)"
    ]


def test_failures_are_drawn_from_zero():
    fig = _failure_figure([_label("a", {"timeout": 4}, 0.05), _label("b", {}, 0.0)])
    (ax,) = fig.axes
    assert ax.axison
    low, high = ax.get_xlim()
    assert low == 0 and high == pytest.approx(0.11)
    assert {p.get_label() for p in ax.containers} == {"failed: timeout", "truncated (length)"}

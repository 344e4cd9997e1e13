"""episode_steps.png: turns per episode, one panel per environment that acts, its labels'
histograms summed; a note without an axis when no environment acts."""

from __future__ import annotations

from rewardprof.stages.report import _steps_figure  # the figure before it is saved


def _label(name, environment, steps_histogram=None):
    return {"label": name, "environment": environment, "steps_histogram": steps_histogram}


def test_one_panel_per_environment_that_acts_with_its_labels_summed():
    fig = _steps_figure(
        [
            _label("easy", "example_session_state_mgmt", {"1": 2, "3": 4}),
            _label("hard", "example_session_state_mgmt", {"3": 1, "8": 5}),
            _label("calls", "xlam_fc", {"2": 7}),
            _label("m", "math"),
        ]
    )
    panels = [ax for ax in fig.axes if ax.axison]
    assert [ax.get_title() for ax in panels] == ["example_session_state_mgmt", "xlam_fc"]
    bars = {int(p.get_x() + p.get_width() / 2 + 0.5): p.get_height() for p in panels[0].patches}
    assert bars == {1: 2, 3: 5, 8: 5}
    assert [p.get_height() for p in panels[1].patches] == [7]


def test_no_environment_that_acts_draws_no_axis():
    fig = _steps_figure([_label("m", "math"), _label("q", "mcq")])
    (ax,) = fig.axes
    assert not ax.axison
    assert [t.get_text() for t in ax.texts] == ["No environment in this run acts"]

"""L0: warm start from an earlier profile (decisions/priors/warm_start.py): the drift kernel, the
drift estimated on the first round, the warm priors, the planner using them, and the config
key's validation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rewardprof.core.config import ConfigError, Export
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records, plan
from rewardprof.decisions.planning.stop_budget import with_stop_thresholds
from rewardprof.decisions.priors.grid import GRID
from rewardprof.decisions.priors.label import fit_label_priors
from rewardprof.decisions.priors.warm_start import (
    PriorSet,
    bayes_warm_labels,
    drift_matrix,
    earlier_grids,
    prior_keys_of,
    warm_key,
    warm_priors,
    warm_weights,
)
from rewardprof.manifest.load import validate_config

K = 16
LOGIT = np.log(GRID[1:-1] / (1 - GRID[1:-1]))


def _mix(rng, size):
    u = rng.random(size)
    return np.where(u < 0.5, 0.0, np.where(u < 0.7, 1.0, rng.random(size)))


def _checkpoints(sd: float, tasks: int = 3000, seed: int = 0, first: int = 4):
    """Earlier counts at K and the new checkpoint's first-round counts (logit drift sd)."""
    rng = np.random.default_rng(seed)
    p = _mix(rng, tasks)
    with np.errstate(divide="ignore"):
        logit = np.log(p) - np.log1p(-p)
    later = np.where((p == 0) | (p == 1), p, 1 / (1 + np.exp(-(logit + rng.normal(0, sd, tasks)))))
    c0 = rng.binomial(K, p)
    c = rng.binomial(first, later)
    return c0, c


def _fit(c0, c, first: int = 4):
    labels = np.full(len(c0), "a", dtype=object)
    ids = np.array([f"t{i}" for i in range(len(c0))], dtype=object)
    base = fit_label_priors(np.full(len(c), first), c, labels, {"a": True}, replicates=0)
    earlier = {str(t): (K, int(e)) for t, e in zip(ids, c0, strict=True)}
    return ids, labels, base, warm_priors(ids, labels, np.full(len(c), first), c, base, earlier)


def test_drift_matrix_is_a_kernel_that_keeps_the_ends_and_spreads_with_tau():
    assert np.array_equal(drift_matrix(0.0), np.eye(len(GRID)))
    spreads = []
    for tau in (0.3, 1.0, 2.0):
        m = drift_matrix(tau)
        assert np.allclose(m.sum(axis=1), 1.0)
        assert m[0, 0] == 1.0 and m[-1, -1] == 1.0  # never / always passes stays so
        assert m[1:-1, 0].sum() == 0 and m[1:-1, -1].sum() == 0  # interior stays interior
        mid = len(GRID) // 2
        shift = m[mid, 1:-1] @ np.abs(LOGIT - LOGIT[mid - 1])
        spreads.append(shift)
        # centred: the mean logit of p = 1/2 after the drift is 0 (the grid is symmetric)
        assert abs(m[mid, 1:-1] @ LOGIT) < 1e-9
    assert spreads == sorted(spreads) and spreads[0] < spreads[-1]


@pytest.mark.parametrize("sd", [0.0, 0.5, 1.0])
def test_the_drift_fitted_on_the_first_round_recovers_the_simulated_one(sd):
    c0, c = _checkpoints(sd, tasks=6000, first=8)
    _, _, _, (_, drift) = _fit(c0, c, first=8)
    assert abs(drift.tau - sd) <= 0.25, drift
    assert drift.leak <= 0.02
    assert drift.candidates[0] == (drift.tau, drift.leak)
    # the corners the first round cannot rule out bracket the fit
    taus = [t for t, _ in drift.candidates]
    assert min(taus) <= drift.tau <= max(taus)


def test_a_checkpoint_unrelated_to_the_earlier_one_is_not_trusted():
    """New pass rates independent of the earlier ones: the fit leaks to the label's prior (or
    drifts far), so a task's earlier 0/16 no longer makes it a sure 0/16 now."""
    c0, _ = _checkpoints(0.0, seed=1)
    _, c = _checkpoints(0.0, seed=2)
    _, _, _, (priors, drift) = _fit(c0, c)
    assert drift.leak >= 0.35 or drift.tau >= 2.0, drift
    never_before = priors[warm_key("a", K, 0)].point
    same_c0, same_c = _checkpoints(0.0, seed=1)
    _, _, _, (trusting, _) = _fit(same_c0, (same_c0 >= 8) * 4)
    assert never_before.w[0] < trusting[warm_key("a", K, 0)].point.w[0]


def test_the_warm_prior_is_the_earlier_posterior_moved_then_mixed_with_the_label_prior():
    c0, c = _checkpoints(0.5)
    grids = earlier_grids(np.full(len(c0), K), c0, np.full(len(c0), "a", dtype=object))
    base = fit_label_priors(np.full(len(c), 4), c, np.full(len(c), "a", dtype=object), {})
    label_w = base["a"].point
    for c_early in (0, 3, 8, 16):
        post = grids["a"].posterior_weights(K, c_early)
        assert np.allclose(warm_weights(grids["a"], K, c_early, label_w, 0.0, 0.0), post)
        assert np.allclose(warm_weights(grids["a"], K, c_early, label_w, 0.7, 1.0), label_w.w)
        moved = warm_weights(grids["a"], K, c_early, label_w, 1.0, 0.1)
        assert np.isclose(moved.sum(), 1.0) and (moved >= 0).all()
    # the earlier counts order the new priors' means
    means = [warm_weights(grids["a"], K, e, label_w, 0.5, 0.0) @ GRID for e in (0, 4, 8, 12, 16)]
    assert means == sorted(means)
    # a mid-range task's prior widens with the drift
    var = []
    for tau in (0.0, 0.5, 1.5):
        w = warm_weights(grids["a"], K, 8, label_w, tau, 0.0)
        var.append(w @ GRID**2 - (w @ GRID) ** 2)
    assert var == sorted(var) and var[0] < var[-1]


def test_a_label_whose_first_round_shows_streaks_is_not_warm_started():
    c0, c = _checkpoints(0.5, tasks=400)
    labels = np.array(["a"] * 200 + ["b"] * 200, dtype=object)
    ids = np.array([f"t{i}" for i in range(400)], dtype=object)
    n = np.full(400, 4)
    base = fit_label_priors(n, c, labels, {}, replicates=0, streaky={"b"})
    assert base["b"].stop_mode == "exact" and base["a"].stop_mode == "bayes"
    earlier = {str(t): (K, int(e)) for t, e in zip(ids, c0, strict=True)}
    priors, _ = warm_priors(ids, labels, n, c, base, earlier, streaky={"b"})
    keys = prior_keys_of(ids, labels, priors)
    # b's tasks keep their label's exact test: no warm key (a bayes prior) reaches them
    assert (keys[200:] == "b").all() and (keys[:200] != "a").all()
    assert bayes_warm_labels(priors, ids, labels) == {"a"}


def test_warm_priors_key_matched_tasks_and_leave_the_rest_on_their_label():
    c0, c = _checkpoints(0.5, tasks=400)
    labels = np.array(["a"] * 200 + ["b"] * 200, dtype=object)
    ids = np.array([f"t{i}" for i in range(400)], dtype=object)
    n = np.full(400, 4)
    base = fit_label_priors(n, c, labels, {"a": True, "b": False}, replicates=0)
    earlier = {str(ids[i]): (K, int(c0[i])) for i in range(0, 400, 2)}  # every other task
    priors, drift = warm_priors(ids, labels, n, c, base, earlier)
    keys = prior_keys_of(ids, labels, priors)
    # label b is partial credit: never warm; a's odd tasks are unmatched
    assert (keys[200:] == "b").all() and (keys[1:200:2] == "a").all()
    assert [keys[i] for i in range(0, 200, 2)] == [
        warm_key("a", K, int(c0[i])) for i in range(0, 200, 2)
    ]
    assert drift.tasks == 100
    for key in set(keys[:200:2]):
        assert priors[key].source == "warm" and priors[key].stop_mode == "bayes"
        # the drift's corners, at the largest leak the label's own candidates, and the point
        # with mass moved off p = 0 and p = 1 as far as the key's first round allows (woken)
        extra = len(base["a"].candidates) - 1 if max(e for _, e in drift.candidates) else 0
        corners = len(drift.candidates) + extra
        assert corners <= len(priors[key].candidates) <= corners + 10
    few, _ = warm_priors(ids, labels, n, c, base, earlier, min_tasks=101)
    assert {few[k].stop_mode for k in set(keys[:200:2])} == {"exact"}
    assert prior_keys_of(ids, labels, PriorSet(base)) is None
    # deterministic: the same inputs, the same priors
    again, _ = warm_priors(ids, labels, n, c, base, earlier)
    assert {k: v.as_dict() for k, v in again.items()} == {k: v.as_dict() for k, v in priors.items()}


def _zero_of_four_stops(wake: float) -> tuple[bool, float]:
    """On 1,000 tasks of the developers' mix (drift sd 0.5) with a share `wake` of the
    never-solved tasks starting to pass at p 0.02-0.05: whether a 0/4 task of the 0/16 key
    stops at the key's threshold, and the largest chance a candidate gives it to pass later."""
    rng = np.random.default_rng(3)
    tasks = 1000
    p = _mix(rng, tasks)
    with np.errstate(divide="ignore"):
        logit = np.log(p) - np.log1p(-p)
    later = np.where((p == 0) | (p == 1), p, 1 / (1 + np.exp(-(logit + rng.normal(0, 0.5, tasks)))))
    woken = (p == 0) & (rng.random(tasks) < wake)
    later = np.where(woken, rng.uniform(0.02, 0.05, tasks), later)
    c0, c = rng.binomial(K, p), rng.binomial(4, later)
    ids, labels, base, (priors, _) = _fit(c0, c)
    keys = prior_keys_of(ids, labels, priors)
    settings = AdaptiveSettings("bayes", first=2, round_size=2, group_size=8, bayes_from=4)
    k = np.full(tasks, K)
    priors = PriorSet(
        with_stop_thresholds(dict(priors), keys, k, labels, settings, Export()), priors.task_keys
    )
    task = int(np.flatnonzero((c0 == 0) & (c == 0))[0])
    one = Records(np.zeros(4, np.int64), np.arange(4), np.zeros(4))
    args = (settings, Export(), np.array([K]), labels[[task]], one)
    warm = plan(*args, priors, prior_keys=keys[[task]])
    cands = priors[keys[task]].candidates
    return bool(warm.done[0]), max(1 - cand.predictive(4, 0, K - 4)[0] for cand in cands)


def test_an_earlier_0_of_16_settles_a_0_of_4_task_only_where_nothing_woke():
    """0/4 now after 0/16 before: the drift on the logit scale keeps p = 0 at 0, yet a task
    never solved before may start to pass rarely (a new skill), which four rollouts cannot
    tell from never. The warm key's candidates include that (woken) prior as far as the key's
    first round fits it as well: where a fifth of the never-solved tasks woke, their first
    round shows it and the key's 0/4 tasks go on (agreement fell to 95-96 % when they
    stopped); where none woke, they stop at 0/4 on the earlier profile."""
    stops, most = _zero_of_four_stops(wake=0.0)
    assert stops and most < 0.05
    stops, most = _zero_of_four_stops(wake=0.2)
    assert not stops and most > 0.05


def _config(tmp_path, **adaptive):
    return {
        "entries": [{"label": "m", "environment": "math", "source": "d.jsonl"}],
        "adaptive": {"mode": "bayes", **adaptive},
    }


def test_config_warm_start_bad_path_is_one_line_naming_the_key(tmp_path):
    cases = {
        "missing": str(tmp_path / "nope.parquet"),
        "not parquet": str(tmp_path / "text.parquet"),
        "no counts": str(tmp_path / "ids.parquet"),
    }
    (tmp_path / "text.parquet").write_text("task_id\n")
    pd.DataFrame({"task_id": ["x"]}).to_parquet(tmp_path / "ids.parquet")
    for what, path in cases.items():
        with pytest.raises(ConfigError) as err:
            validate_config(_config(tmp_path, warm_start=path))
        text = str(err.value)
        assert "adaptive.warm_start" in text and path in text and "\n" not in text, what
        assert "profile/tasks.parquet" in text, what
    assert "num_rollouts" in str(
        pytest.raises(
            ConfigError, validate_config, _config(tmp_path, warm_start=cases["no counts"])
        ).value
    )
    good = tmp_path / "tasks.parquet"
    pd.DataFrame({"task_id": ["x"], "num_rollouts": [16], "num_passed": [3]}).to_parquet(good)
    assert validate_config(_config(tmp_path, warm_start=str(good))).adaptive.warm_start == str(good)
    with pytest.raises(ConfigError, match=r"adaptive\.warm_start: needs adaptive\.mode bayes"):
        validate_config(_config(tmp_path, mode="exact", warm_start=str(good)))


def test_a_warm_start_keeps_the_first_round_of_bayes(tmp_path):
    """One default first round, with an earlier profile or without (a first round of 3 was the
    default with one until it cost more than 4: docs/benchmarks.md); a given one is kept."""
    good = tmp_path / "tasks.parquet"
    pd.DataFrame({"task_id": ["x"], "num_rollouts": [16], "num_passed": [3]}).to_parquet(good)
    first = {
        "cold": _config(tmp_path),
        "warm": _config(tmp_path, warm_start=str(good)),
        "warm, given 3": _config(tmp_path, warm_start=str(good), min_rollouts=3),
        "cold, given 2": _config(tmp_path, min_rollouts=2),
    }
    got = {what: validate_config(c).adaptive.min_rollouts for what, c in first.items()}
    assert got == {"cold": 4, "warm": 4, "warm, given 3": 3, "cold, given 2": 2}


def test_a_small_labels_warm_started_tasks_take_bayes_and_are_audited():
    """A label of 20 tasks takes the exact test on its own; its matched tasks, with the drift
    fitted on every matched task, take bayes, so the label is in the audit's reach."""
    c0, c = _checkpoints(0.5, tasks=220)
    labels = np.array(["big"] * 200 + ["small"] * 20, dtype=object)
    ids = np.array([f"t{i}" for i in range(220)], dtype=object)
    n = np.full(220, 4)
    base = fit_label_priors(n, c, labels, {"big": True, "small": True}, replicates=0)
    assert base["small"].stop_mode == "exact"
    earlier = {str(ids[i]): (K, int(c0[i])) for i in range(220)}
    priors, _ = warm_priors(ids, labels, n, c, base, earlier)
    assert bayes_warm_labels(priors, ids, labels) == {"big", "small"}
    assert priors["small"].stop_mode == "exact"  # an unmatched task of it still is exact
    assert bayes_warm_labels(PriorSet(base), ids, labels) == set()

"""Export keep rules / weights and the sizing arithmetic, by hand."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rewardprof.core.config import ConfigError
from rewardprof.decisions.priors.posterior import MixturePrior
from rewardprof.estimation.signal import useful_at, useful_prediction
from rewardprof.manifest.load import validate_config
from rewardprof.stages import ExportPaths
from rewardprof.stages.export import REASONS, drop_reasons, label_weights
from rewardprof.store.layout import ExportFiles
from rewardprof.tools.estimate import estimate


def _cfg(export=None, entries=("a", "b"), **extra):
    return validate_config(
        {
            "entries": [
                {"label": lbl, "environment": "math", "source": "x", "num_repeats": 4}
                for lbl in entries
            ],
            "export": export or {},
            **extra,
        }
    )


def _reasons(cfg, rates, n=None, signal=None):
    rates = np.array(rates, dtype=float)
    t = pa.table(
        {
            "pass_rate": rates,
            "pass_rate_excl_truncated": rates,
            "num_rollouts": n if n is not None else [4] * len(rates),
            "grpo_signal": signal if signal is not None else 1 - rates**8 - (1 - rates) ** 8,
        }
    )
    return [REASONS[i] if i >= 0 else "kept" for i in drop_reasons(cfg, t)]


def test_default_rules_drop_zero_and_one_and_unscored():
    got = _reasons(_cfg(), [0.0, 1.0, 0.5, np.nan, 0.25], n=[4, 4, 4, 0, 4])
    assert got == ["all_fail", "all_pass", "kept", "no_rollouts", "kept"]


def test_band_and_signal_rules_in_order():
    cfg = _cfg(
        {
            "min_pass_rate": 0.3,
            "max_pass_rate": 0.8,
            "min_grpo_signal": 0.95,
            "drop_all_pass": False,
        }
    )
    # 1.0 is not dropped as all_pass (rule off) but as above the band
    got = _reasons(cfg, [0.25, 0.9, 1.0, 0.5, 0.75], signal=[0.9, 0.5, 0.0, 0.99, 0.9])
    assert got == [
        "below_min_pass_rate",
        "above_max_pass_rate",
        "above_max_pass_rate",
        "kept",
        "low_grpo_signal",
    ]


def test_min_rollouts():
    got = _reasons(_cfg({"min_rollouts": 3}), [0.5, 0.5], n=[2, 3])
    assert got == ["no_rollouts", "kept"]


def test_weights_reach_target_share():
    cfg = _cfg({"target_share": {"a": 3, "b": 1}})
    w, notes = label_weights(cfg, {"a": 10, "b": 30})
    # a: 0.75 * 40 / 10 = 3.0; b: 0.25 * 40 / 30 = 1/3 -> a holds 30 of 40 total weight
    assert w["a"] == pytest.approx(3.0) and w["b"] == pytest.approx(1 / 3)
    assert 10 * w["a"] / (10 * w["a"] + 30 * w["b"]) == pytest.approx(0.75)
    assert notes == []
    w, notes = label_weights(cfg, {"a": 0, "b": 30})  # a's target cannot be met
    assert w == {"a": 0.0, "b": pytest.approx(1.0)} and "a: target share 3" in notes[0]
    assert label_weights(_cfg(), {"a": 5, "b": 0}) == ({"a": 1.0, "b": 1.0}, [])


def test_export_config_checks():
    with pytest.raises(ConfigError, match="missing label"):
        _cfg({"target_share": {"a": 1}})
    with pytest.raises(ConfigError, match="unknown label"):
        _cfg({"target_share": {"a": 1, "b": 1, "c": 1}})
    with pytest.raises(ConfigError, match="min_pass_rate"):
        _cfg({"min_pass_rate": 0.9, "max_pass_rate": 0.1})
    with pytest.raises(ConfigError, match="did you mean min_grpo_signal"):
        _cfg({"min_grpo_signl": 0.1})


def _pilot_label(env: str, tasks: int, rollouts: int, hours: float, counts) -> dict:
    return {
        "environment": env,
        "tasks": tasks,
        "num_repeats": 4,
        "rollouts": rollouts,
        "gpu_hours": hours,
        "rollouts_per_gpu_hour": rollouts / hours,
        "counts": counts,
    }


def _pilot(rollouts: int, gpu_hours: float, startup_overhead_s: float = 0.0, **labels) -> dict:
    """A measured pilot as measure_pilot returns it (one job, 1 GPU per engine)."""
    return {
        "run_dir": "p",
        "rollouts": rollouts,
        "jobs": 1,
        "engine_hours": gpu_hours,
        "gpu_hours": gpu_hours,
        "gpus_per_engine": 1,
        "rollouts_per_gpu_hour": rollouts / gpu_hours,
        "output_tokens_per_gpu_hour": 1.0,
        "startup_overhead_s": startup_overhead_s,
        "labels": labels,
    }


def test_useful_fraction_from_the_prior_by_hand():
    # Beta(1, 1): E[p^K] = 1 / (K + 1), so useful = 1 - 2 / (K + 1); point masses add nothing
    assert useful_at(MixturePrior(0.0, 0.0, 1.0, 1.0), 2) == pytest.approx(1 / 3)
    assert useful_at(MixturePrior(0.5, 0.25, 1.0, 1.0), 8) == pytest.approx(0.25 * (1 - 2 / 9))


def test_estimate_on_an_all_fail_pilot_reports_an_interval():
    # 12 tasks x 4 rollouts, all failed: the plug-in said "no useful task" (0 of 200,000, shown
    # as ~1 after rounding); the data still allow a sizeable share of rarely solved tasks
    pred = useful_prediction([(4, 0)] * 12, 8)
    assert pred["useful_fraction"] < 1e-6 and pred["low"] < 1e-6
    assert 0.15 < pred["high"] < 0.5
    # more all-fail evidence narrows it
    assert useful_prediction([(4, 0)] * 120, 8)["high"] < pred["high"] / 3
    # and `estimate` reports it for 200,000 tasks at K = 8
    pilot = _pilot(rollouts=48, gpu_hours=0.1, a=_pilot_label("math", 12, 48, 0.1, [(4, 0)] * 12))
    target = validate_config(
        {"entries": [{"label": "a", "environment": "math", "source": "x", "num_repeats": 8}]}
    )
    (row,) = estimate(pilot, target, gpus=1, tasks={"a": 200_000})["labels"]
    assert row["useful_tasks"] < 1 and row["useful_tasks_high"] > 30_000


def test_useful_interval_holds_the_truth_of_a_known_mix():
    rng = np.random.default_rng(4)
    p = rng.beta(2, 2, 400)
    c = rng.binomial(8, p)
    pred = useful_prediction([(8, int(x)) for x in c], 8)
    truth = float(np.mean(1 - p**8 - (1 - p) ** 8))
    assert pred["low"] <= truth <= pred["high"]
    assert pred["high"] - pred["low"] < 0.2


def test_estimate_arithmetic():
    pilot = _pilot(
        rollouts=300,
        gpu_hours=1.5,
        startup_overhead_s=360.0,
        a=_pilot_label("math", 25, 100, 1.0, [(4, 2)] * 25),
        b=_pilot_label("mcq", 50, 200, 0.5, [(4, 4)] * 50),
    )
    target = validate_config(
        {
            "num_shards": 8,
            "entries": [
                {"label": "a", "environment": "math", "source": "x", "num_repeats": 2},
                {"label": "c", "environment": "mcq", "source": "y", "num_repeats": 8},
            ],
        }
    )
    res = estimate(pilot, target, gpus=4, tasks={"a": 1000, "c": 400})
    a, c = res["labels"]
    assert (a["basis"], a["rollouts"], a["gpu_hours"]) == ("label", 2000, 20.0)
    # every pilot task of a at 2/4, K = 2 <= 4 rollouts: directly from the tasks, the chance
    # that 2 of a task's 4 rollouts drawn without replacement differ: 1 - 2 / C(4, 2)
    assert a["useful_basis"] == "direct"
    assert a["useful_fraction"] == pytest.approx(1 - 2 / 6, abs=1e-3)
    assert a["useful_fraction_low"] <= a["useful_fraction"] <= a["useful_fraction_high"]
    assert a["useful_tasks"] == pytest.approx(1000 * a["useful_fraction"], abs=1)
    # adaptive: every task settles after 2 rollouts or runs both: exact never costs more
    assert a["gpu_hours_exact"] <= a["gpu_hours"]
    # c is not in the pilot: borrows b's rate through its environment
    assert (c["basis"], c["rollouts"], c["gpu_hours"]) == ("environment mcq", 3200, 8.0)
    # ... but not its useful fraction: no point value, b's interval, marked
    assert c["useful_fraction"] is None and c["useful_tasks"] is None
    assert c["useful_basis"].startswith("no pilot data")
    assert c["useful_fraction_low"] == 0.0 and 0.0 < c["useful_fraction_high"] < 0.2
    assert res["total"]["useful_tasks_exclude"] == ["c"]
    tot = res["total"]
    assert tot["gpu_hours"] == 28.0 and tot["rollouts"] == 5200
    # 8 jobs on 4 engines: 2 waves of (28 h / 8 jobs + 0.1 h startup)
    assert tot["wall_hours"] == pytest.approx(2 * (3.5 + 0.1))
    assert tot["gpu_hours_with_startup"] == pytest.approx(28.8)
    with pytest.raises(ValueError, match="unknown label"):
        estimate(pilot, target, gpus=4, tasks={"zzz": 1, "a": 1, "c": 1})


def test_export_files_written_in_slices(tmp_path, monkeypatch):
    import json

    import pyarrow.parquet as pq

    from rewardprof.stages import export as ex

    monkeypatch.setattr(ex, "SLICE_ROWS", 3)  # slices cross the label boundary at task 5
    rates = [0.5, 0.0, 0.25, 0.75, 1.0, 0.5, 0.5, 0.0, 0.5, 0.25]
    n = len(rates)
    t = pa.table(
        {
            "task_index": list(range(n)),
            "task_id": [f"t{i}" for i in range(n)],
            "label": ["a"] * 5 + ["b"] * 5,
            "environment": ["math"] * n,
            "num_rollouts": [4] * n,
            "pass_rate": rates,
            "pass_rate_excl_truncated": rates,
            "grpo_signal": [0.9] * n,
            "sample": [
                json.dumps({"i": i}) if i != 6 else '{"reward_profile":"old"}' for i in range(n)
            ],
        }
    )
    pq.write_table(t, tmp_path / "p.parquet")
    (tmp_path / "r.json").write_text(
        json.dumps(
            {
                "entries": [
                    {"label": "a", "environment": "math", "start": 0, "end": 5},
                    {"label": "b", "environment": "math", "start": 5, "end": 10},
                ]
            }
        )
    )
    paths = ExportPaths(
        profile=tmp_path / "p.parquet",
        report=tmp_path / "r.json",
        out=ExportFiles(tmp_path / "out"),
    )
    res = ex.run(_cfg(), paths)
    assert (res["kept"], res["dropped"]) == (7, 3)

    def read(name):
        return [json.loads(x) for x in (tmp_path / "out" / name).read_text().splitlines()]

    a, b, combined = read("by_label/a.jsonl"), read("by_label/b.jsonl"), read("combined.jsonl")
    assert [r["i"] for r in a] == [0, 2, 3]
    assert [r["reward_profile"]["task_index"] for r in b] == [5, 6, 8, 9]
    assert combined == a + b
    # a row that already had the key gets it replaced, not duplicated
    assert b[1] == {"reward_profile": b[1]["reward_profile"]}
    assert b[1]["reward_profile"]["weight"] == 1.0


def test_pilot_rates_divide_unrounded_gpu_hours(tmp_path):
    """The environment basis divided by per-label GPU-hours rounded to 6 decimals: a pilot of
    a few seconds has labels of ~1e-6 h, so its borrowed rate was off by tens of percent."""
    import json

    import pyarrow.parquet as pq

    from rewardprof.store.layout import RunLayout
    from rewardprof.tools.estimate import measure_pilot

    layout = RunLayout(tmp_path)
    layout.materialize_report.parent.mkdir(parents=True)
    entries = [
        {"label": "a", "environment": "math", "start": 0, "end": 2, "num_repeats": 2},
        {"label": "b", "environment": "math", "start": 2, "end": 4, "num_repeats": 2},
    ]
    layout.materialize_report.write_text(json.dumps({"entries": entries}))
    # one writer, 0.01 s of generation: 8 rollouts, a's output 3x b's (+1 per rollout)
    rollouts = pa.table(
        {
            "task_index": [0, 0, 1, 1, 2, 2, 3, 3],
            "status": ["ok"] * 8,
            "request_n": [2] * 8,
            "latency_s": [0.01] * 8,
            "started_at": [0.0] * 8,
            "finished_at": [0.01] * 8,
            "completion_tokens": [5, 5, 5, 5, 1, 1, 1, 1],
            "writer": ["0-of-1_x"] * 8,
            "reward": [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0],
        }
    )
    pq.write_table(rollouts, layout.rollouts)
    layout.profile_tasks.parent.mkdir(parents=True)
    prof = pa.table(
        {"label": ["a", "a", "b", "b"], "num_rollouts": [2] * 4, "num_passed": [1, 0, 2, 1]}
    )
    pq.write_table(prof, layout.profile_tasks)
    pilot = measure_pilot(tmp_path)
    hours = 0.01 / 3600
    assert pilot["labels"]["a"]["gpu_hours"] == pytest.approx(hours * 24 / 32, rel=1e-12)
    # a target label c of environment math borrows a and b together: 8 rollouts / all hours
    target = validate_config(
        {"entries": [{"label": "c", "environment": "math", "source": "x", "num_repeats": 2}]}
    )
    (c,) = estimate(pilot, target, gpus=1, tasks={"c": 10})["labels"]
    assert c["rollouts_per_gpu_hour"] == pytest.approx(8 / hours, rel=1e-6)


def test_total_useful_interval_is_not_the_sum_of_the_labels_bounds():
    from rewardprof.estimation.bootstrap import total_useful

    parts = [{"useful_fraction": 5.0, "low": 0.0, "high": 10.0}] * 2
    tot = total_useful(parts)
    assert tot["useful_fraction"] == 10.0
    # independent labels: deviations add in quadrature, narrower than [0, 20]
    assert tot["low"] == pytest.approx(10 - 50**0.5) and tot["high"] == pytest.approx(10 + 50**0.5)

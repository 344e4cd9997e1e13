"""L3: one real GRPO optimizer step of the embedded model (torch on CPU, the engine's interpreter)
on the checked-in two-row fixture (one accepted, one rejected rollout), and on a profiled run's
export: the real Snakefile profiles scripted answers (a fake engine, so which tasks carry signal
is known by construction; the verifier, profile and export are the real ones), then grpo-step
reads RUN_DIR's export and its dropped tasks as controls; those controls alone (a batch the
profile dropped whole) must not move the policy, and the step run again on the same batch in
another process (--serve) gives the same numbers."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from engine_helpers import MODEL, models_dir, require_engine  # noqa: F401  # fixture
from helpers import WITHOUT_REPORT, endpoint_config, math_row, snakemake, write_config, write_jsonl

from rewardprof.engine.model import model_key
from rewardprof.store.layout import RunLayout
from rewardprof.testing.fake_server import FakeOpenAI
from rewardprof.train.from_run import run_batch
from rewardprof.train.refit import PARITY_BOUND

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "grpo" / "two_rows.jsonl"


def _grpo_step(run_dir: Path, batch: Path | None, model: Path, *extra: str) -> dict:
    env = dict(os.environ, REWARDPROF_ENGINE_PYTHON=require_engine())
    cmd = [sys.executable, "-m", "rewardprof.cli", "grpo-step", str(run_dir)]
    cmd += ["--batch", str(batch)] if batch else []
    proc = subprocess.run(
        [*cmd, "--model", str(model), "--seed", "7", *extra],
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads((run_dir / "grpo_step.json").read_text())


@pytest.fixture(scope="module")
def two_rows(models_dir, tmp_path_factory):  # noqa: F811
    return _grpo_step(tmp_path_factory.mktemp("run"), FIXTURE, models_dir / model_key(MODEL))


def test_two_row_fixture_one_step_exact_rewards_signed_advantages(two_rows):
    out = two_rows
    assert (out["reward_min"], out["reward_max"], out["reward_mean"]) == (0.0, 1.0, 0.5)
    [task] = out["tasks"]
    assert task["kept"] and task["advantages"][0] > 0 > task["advantages"][1]
    assert out["steps"] == 1
    assert math.isfinite(out["loss"])
    assert math.isfinite(out["grad_norm"]) and out["grad_norm"] > 0
    assert out["lr"] > 0
    assert (out["n_kept_groups"], out["n_dropped_groups"]) == (1, 0)
    # the step moved the policy the way the rewards say: the accepted completion gained
    # probability, the rejected one lost it
    assert out["logprob_after"][0] > out["logprob_before"][0]
    assert out["logprob_after"][1] < out["logprob_before"][1]
    assert out["objective_after"] > out["objective_before"]


# question -> (answer, how the scripted policy answers: right, wrong, or right on even seeds
# only; a request's n=4 samples take seeds s..s+3, so "half" passes exactly 2 of 4)
PROFILED = {"2 + 3": ("5", "right"), "7 * 6": ("42", "wrong"), "9 - 4": ("5", "half")}
PROFILED["5 + 5"] = ("10", "half")


def _scripted(prompt: str, seed: int | None) -> str:
    for q, (ans, how) in PROFILED.items():
        if q in prompt:
            right = how == "right" or (how == "half" and seed is not None and seed % 2 == 0)
            return f"It is \\boxed{{{ans if right else 0}}}."
    return "no idea"


@pytest.fixture(scope="module")
def profiled(models_dir, tmp_path_factory):  # noqa: F811
    root = tmp_path_factory.mktemp("profiled")
    rows = [math_row(f"What is {q}?", a) for q, (a, _) in PROFILED.items()]
    write_jsonl(root / "data/m.jsonl", rows)
    entries = [{"label": "m", "environment": "math", "source": "data/m.jsonl", "num_repeats": 4}]
    with FakeOpenAI(_scripted) as server:
        # short completions: the refit test profiles this run again on the real engine
        cfg = endpoint_config(server.base_url, entries, num_shards=1, sampling={"max_tokens": 16})
        r = snakemake(root, *WITHOUT_REPORT, "--configfile", str(write_config(root, cfg)))
        assert r.returncode == 0, r.stderr[-4000:]
    run = root / "results" / "t"
    return run, _grpo_step(run, None, models_dir / model_key(MODEL))


def test_a_profiled_run_kept_tasks_signed_dropped_controls_exactly_zero(profiled):
    run, out = profiled
    report = json.loads((run / "export" / "report.json").read_text())
    assert report["dropped_tasks"]["all_pass"] == [0] and report["dropped_tasks"]["all_fail"] == [1]
    by_task = {t["task_index"]: t for t in out["tasks"]}
    assert sorted(by_task) == [0, 1, 2, 3]  # tasks 2, 3 kept; 0 and 1 the controls
    assert (out["n_kept_groups"], out["n_dropped_groups"]) == (2, 2)
    for i in (2, 3):
        t = by_task[i]
        assert t["kept"] and sorted(t["rewards"]) == [0.0, 0.0, 1.0, 1.0]
        assert all(a != 0 for a in t["advantages"])
        assert all(
            (a > 0) == (r == 1.0) for a, r in zip(t["advantages"], t["rewards"], strict=True)
        )
    for i in (0, 1):
        assert not by_task[i]["kept"] and by_task[i]["advantages"] == [0.0] * 4
    assert out["batch"] == {"source": "export", "n_control_tasks": 2, "skipped_acting_tasks": []}
    assert out["steps"] == 1 and math.isfinite(out["loss"]) and out["grad_norm"] > 0


def test_a_profiled_runs_dropped_tasks_alone_give_a_zero_gradient(profiled, models_dir, tmp_path):  # noqa: F811
    run, _ = profiled
    # the controls only: the run's rollouts of its dropped tasks, as a batch file
    rows, _ = run_batch(run, controls=2)
    dropped = [r for r in rows if not r["kept"]]
    assert {r["task_index"] for r in dropped} == {0, 1} and len(dropped) == 8
    batch = write_jsonl(tmp_path / "dropped.jsonl", dropped)
    out = _grpo_step(tmp_path / "run", batch, models_dir / model_key(MODEL))
    assert out["n_dropped_groups"] == 2 and out["n_kept_groups"] == 0
    assert out["grad_norm"] == 0.0
    assert all(a == 0.0 for t in out["tasks"] for a in t["advantages"])
    assert out["logprob_after"] == pytest.approx(out["logprob_before"], abs=1e-6)


def test_serve_refit_acknowledged_parity_bounded_and_profiled_through_the_workflow(
    profiled,
    models_dir,  # noqa: F811
):
    """--serve: the stepped weights are written, a real vLLM serves the starting weights then the
    stepped ones; the trainer's token log probabilities match the engine's on both, the refit
    engine's log probability of the rewarded completion rose, and the run's config on the refit
    weights profiles the same tasks through the workflow."""
    run, first = profiled
    root = run.parents[1]
    out = _grpo_step(run, None, models_dir / model_key(MODEL), "--serve")
    # the same batch, model and seed as the profiled run's first step, in another process: the
    # same numbers to 1e-6
    for key in ("loss", "grad_norm", "lr", "reward_mean"):
        assert out[key] == pytest.approx(first[key], abs=1e-6)
    for x, y in zip(out["logprob_after"], first["logprob_after"], strict=True):
        assert x == pytest.approx(y, abs=1e-6)
    refit = out["refit"]
    assert refit["acknowledged"] is True
    assert out["logprob_parity_max_abs"] is not None
    assert 0 <= out["logprob_parity_max_abs"] <= PARITY_BOUND
    assert refit["parity_after_max_abs"] <= PARITY_BOUND
    assert out["tasks"] and out["batch"]["source"] == "export"
    # the refit engine serves the stepped weights: the step's objective rose on it as on the
    # trainer, and its log probabilities moved by far more than the parity bound
    assert refit["engine_objective_after"] > refit["engine_objective_before"]
    assert refit["engine_objective_after"] == pytest.approx(out["objective_after"], abs=1e-3)
    assert refit["engine_moved_max_abs"] > 10 * PARITY_BOUND
    # the engine's sums agree with the trainer's, before and after
    for side in ("before", "after"):
        engine, trainer = refit[f"engine_logprob_{side}"], out[f"logprob_{side}"]
        assert engine == pytest.approx(trainer, abs=PARITY_BOUND * 16)
    model = Path(refit["model_dir"])
    assert (model / "config.json").is_file() and list(model.glob("*.safetensors"))

    config = Path(refit["config"])
    r = snakemake(root, *WITHOUT_REPORT, "--configfile", str(config), timeout=1500)
    assert r.returncode == 0, r.stderr[-4000:]
    refit_run = root / "results" / "t-refit"
    rollouts = pq.read_table(refit_run / "rollouts.parquet").to_pylist()
    assert len(rollouts) == 16 and {x["status"] for x in rollouts} == {"ok"}
    engine_log = RunLayout(refit_run).shard_log("engine", 0, 1).read_text()
    assert f"--model {model.resolve()} " in engine_log

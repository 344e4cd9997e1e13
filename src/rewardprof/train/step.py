"""`rewardprof grpo-step RUN_DIR`: one GRPO optimizer step on a batch of rollouts.

The batch is the run's export (kept tasks) plus a few tasks it dropped for having no signal, as
controls (`from_run.py`), or, with `--batch FILE`, JSON Lines, one rollout a line: task_index,
kept (the profile's decision), prompt (text, or chat messages), completion, reward. Rollouts of
one task form a group. rewardprof computes the advantages
(`advantages.py`) and the summary; the step itself (policy loss, backward, AdamW) runs under the
engine's interpreter, where torch and transformers live (`make install-train`), on the converted
model the engine serves. The result is written to RUN_DIR/grpo_step.json
(temp file then rename).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from rewardprof.core.atomic import write_json_atomic
from rewardprof.engine.model import REPO_ROOT, engine_python
from rewardprof.store.layout import GrpoStepLayout, RunLayout
from rewardprof.train.advantages import VARIANTS, group_advantages
from rewardprof.train.from_run import TrainError, run_batch
from rewardprof.train.refit import objective_of, refit_and_compare, run_config

SCRIPT = Path(__file__).parent / "scripts" / "grpo_torch.py"
DEFAULT_MODEL = "resources/models/smollm2-135m-c1"
FIELDS = {"task_index": int, "kept": bool, "prompt": (str, list), "completion": str}
FIELDS["reward"] = float


def read_batch(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TrainError(
                f"{path}:{n}: not JSON ({exc.msg}); one rollout object a line"
            ) from exc
        for key, kind in FIELDS.items():
            value = row.get(key)
            ok = isinstance(value, (int, float)) if kind is float else isinstance(value, kind)
            if not ok or (kind is int and isinstance(value, bool)):
                name = "str or a list of messages" if key == "prompt" else kind.__name__
                raise TrainError(f"{path}:{n}: key {key!r} must be a {name}")
        rows.append(row)
    if not rows:
        raise TrainError(f"{path}: no rollouts; the batch needs at least one task's group")
    return rows


def plan(rows: list[dict], variant: str) -> tuple[list[dict], list[float]]:
    """The per-task summary (task_index, kept, rewards, advantages) and each row's advantage."""
    order = sorted({r["task_index"] for r in rows})
    groups = {t: [r for r in rows if r["task_index"] == t] for t in order}
    kept = [all(r["kept"] for r in groups[t]) for t in order]
    rewards = [[float(r["reward"]) for r in groups[t]] for t in order]
    advs = group_advantages(rewards, kept, variant)
    tasks = [
        {"task_index": t, "kept": k, "rewards": rw, "advantages": a}
        for t, k, rw, a in zip(order, kept, rewards, advs, strict=True)
    ]
    per_row = {
        id(r): a
        for t, a in zip(order, advs, strict=True)
        for r, a in zip(groups[t], a, strict=True)
    }
    return tasks, [per_row[id(r)] for r in rows]


def require_train_env(python: str) -> None:
    probe = "import importlib.util as u,sys; sys.exit(any(u.find_spec(m) is None for m in ('torch','transformers')))"  # noqa: E501
    if subprocess.run([python, "-c", probe]).returncode != 0:
        raise TrainError(
            f"torch and transformers are missing from {python}: run make install-train"
        )


def _run_step(python: str, request: dict) -> dict:
    proc = subprocess.run(
        [python, str(SCRIPT)], input=json.dumps(request), capture_output=True, text=True
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TrainError(f"grpo step under {python} failed: {last}")
    return json.loads(proc.stdout)


def grpo_step(run_dir: Path, rows: list[dict], model: Path, args: argparse.Namespace) -> dict:
    tasks, advantages = plan(rows, args.variant)
    python = engine_python()
    require_train_env(python)
    request = {
        "model": str(model),
        "lr": args.lr,
        "seed": args.seed,
        "save_dir": str(GrpoStepLayout(RunLayout(run_dir)).model) if args.serve else None,
        "rows": [
            dict(prompt=r["prompt"], completion=r["completion"], advantage=a)
            for r, a in zip(rows, advantages, strict=True)
        ],
    }
    step = _run_step(python, request)
    rewards = [float(r["reward"]) for r in rows]
    result = {
        "steps": step["steps"],
        "loss": step["loss"],
        "grad_norm": step["grad_norm"],
        "lr": step["lr"],
        "advantage_variant": args.variant,
        "reward_min": min(rewards),
        "reward_max": max(rewards),
        "reward_mean": sum(rewards) / len(rewards),
        "n_kept_groups": sum(t["kept"] for t in tasks),
        "n_dropped_groups": sum(not t["kept"] for t in tasks),
        "n_rollouts": len(rows),
        "n_completion_tokens": sum(len(r["completion_ids"]) for r in step["rows"]),
        "tasks": tasks,
        "logprob_before": [sum(r["logprobs_before"]) for r in step["rows"]],
        "logprob_after": [sum(r["logprobs_after"]) for r in step["rows"]],
        "objective_before": objective_of([r["logprobs_before"] for r in step["rows"]], advantages),
        "objective_after": objective_of([r["logprobs_after"] for r in step["rows"]], advantages),
        "logprob_parity_max_abs": None,  # the engine's side: --serve
    }
    if args.serve:
        result |= refit_and_compare(run_dir, args.run_config, model, step["rows"], advantages)
    return result


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", type=Path, help="the run directory; grpo_step.json goes there")
    p.add_argument(
        "--batch", type=Path, default=None, help="rollouts, JSON Lines (default: the run's export)"
    )
    p.add_argument(
        "--controls", type=int, default=2, help="dropped no-signal tasks added as controls"
    )
    p.add_argument("--model", type=Path, default=None, help=f"default: {DEFAULT_MODEL}")
    p.add_argument("--variant", choices=VARIANTS, default="grpo", help="advantage estimator")
    p.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate")
    p.add_argument("--seed", type=int, default=0, help="torch seed (same seed, same numbers)")
    p.add_argument(
        "--serve",
        action="store_true",
        help="write the stepped weights, serve them with the run's engine (refit) and compare "
        "the trainer's token log probabilities with the engine's",
    )


def run_command(args: argparse.Namespace) -> int:
    model = args.model or next(
        (p for p in (Path(DEFAULT_MODEL), REPO_ROOT / DEFAULT_MODEL) if p.is_dir()),
        Path(DEFAULT_MODEL),
    )
    if not (model / "config.json").is_file():
        raise TrainError(f"model directory {model} has no config.json; convert it: make run")
    # before the step: a --serve that cannot start the engine says so without training first
    args.run_config = run_config(args.run_dir) if args.serve else None
    if args.batch is None:
        rows, source = run_batch(args.run_dir, args.controls)
    elif args.batch.is_file():
        rows, source = read_batch(args.batch), {"source": str(args.batch)}
    else:
        raise TrainError(f"{args.batch}: batch file missing")
    args.run_dir.mkdir(parents=True, exist_ok=True)
    out = grpo_step(args.run_dir, rows, model, args) | {"batch": source}
    path = GrpoStepLayout(RunLayout(args.run_dir)).result
    write_json_atomic(path, out)
    print(f"{path}: loss {out['loss']:.6g}, grad_norm {out['grad_norm']:.6g}")
    if args.serve:
        refit = out["refit"]
        print(
            f"refit: {'acknowledged' if refit['acknowledged'] else 'NOT acknowledged'} "
            f"(parity before {out['logprob_parity_max_abs']:.3g}, after "
            f"{refit['parity_after_max_abs']:.3g}); profile the stepped policy: "
            f"snakemake --cores all --configfile {refit['config']}"
        )
        return 0 if refit["acknowledged"] else 1
    return 0

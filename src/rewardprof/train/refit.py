"""`rewardprof grpo-step --serve`: the engine refit on the stepped weights; trainer/engine parity.

The step writes its updated weights to RUN_DIR/grpo_step/model. A real vLLM server (the run's
engine section, serve mode) is started twice: on the weights the trainer started from, then on the
updated ones (a restart is vLLM's reload). Each time it scores every batch row's prompt and
completion tokens as a prompt (`prompt_logprobs`), so the engine's log probability of each
completion token is read for exactly the tokens the trainer scored:
- parity: the largest |trainer - engine| token log-probability difference, before the step (the
  same weights on both sides) and after it (the trainer's updated model against the refit engine);
- acknowledgement: the refit engine serves the new weights when its log probability of the most
  rewarded completion rose from the first engine's, and its parity with the updated trainer holds.
Beside them RUN_DIR/grpo_step/refit.yaml: the run's config with the engine on the refit weights
and the run named <run>-refit, for profiling the updated policy through the workflow.
"""

from __future__ import annotations

import json
import math
import urllib.request
from pathlib import Path

import yaml

from rewardprof.core.atomic import atomic_path
from rewardprof.core.config import Config
from rewardprof.engine.server import serve
from rewardprof.store.layout import GrpoStepLayout, RunLayout
from rewardprof.train.from_run import TrainError

# float32 on both sides, different kernels: measured differences are ~1e-5 to 1e-3
# (docs/training.md); a refit engine that still served the old weights would differ by the
# step's change, and a wrong model or tokenization by whole nats
PARITY_BOUND = 0.02
REQUEST_TIMEOUT_S = 300
# a prompt_logprobs reply is ~100 bytes a token; a context of 2,048 tokens ~0.2 MB
MAX_REPLY_BYTES = 16 * 2**20


def run_config(run_dir: Path) -> Config:
    path = RunLayout(run_dir).stage_config("full")
    if not path.is_file():
        raise TrainError(
            f"{path} missing: --serve starts the run's engine from its config; "
            "profile the run first (make run), or drop --serve"
        )
    return Config.model_validate(json.loads(path.read_text()))


def _served(cfg: Config, model: Path, name: str) -> Config:
    data = cfg.model_dump(mode="json")
    data["engine"] |= {
        "mode": "serve",
        "model": str(model.resolve()),
        "served_model_name": name,
        "base_url": None,
        "endpoints_file": None,
    }
    return Config.model_validate(data)


def _prompt_logprobs(base_url: str, model: str, prompt_ids: list, completion_ids: list) -> list:
    """The engine's log probability of each completion token, given the prompt tokens before it."""
    ids = list(prompt_ids) + list(completion_ids)
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0}
    body["prompt_logprobs"] = 0  # the prompt token's own log probability, no alternatives
    req = urllib.request.Request(
        f"{base_url}/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
        reply = resp.read(MAX_REPLY_BYTES + 1)  # bounded while read
    if len(reply) > MAX_REPLY_BYTES:
        raise TrainError(f"{base_url}: prompt_logprobs reply over {MAX_REPLY_BYTES} bytes")
    choice = json.loads(reply)["choices"][0]
    per_position = choice["prompt_logprobs"]
    return [per_position[j][str(ids[j])]["logprob"] for j in range(len(prompt_ids), len(ids))]


def engine_logprobs(cfg: Config, model: Path, name: str, rows: list[dict], log: Path) -> list:
    with serve(_served(cfg, model, name), log) as server:
        return [
            _prompt_logprobs(server.base_url, name, r["prompt_ids"], r["completion_ids"])
            for r in rows
        ]


def _max_abs(trainer: list[list[float]], engine: list[list[float]]) -> float:
    diffs = [
        abs(a - b) for t, e in zip(trainer, engine, strict=True) for a, b in zip(t, e, strict=True)
    ]
    return max(diffs, default=0.0)


def objective_of(logprobs: list[list[float]], advantages: list[float]) -> float:
    """GRPO's surrogate objective at ratio 1, the step's loss negated: the mean over rollouts of
    advantage x the completion's mean token log probability. The step raises it (to first
    order, for AdamW's first step too); a single completion's log probability may still fall:
    AdamW's first step moves every weight by about lr along its gradient's sign, which need not
    be the rewarded completion's own direction."""
    terms = [a * sum(lp) / len(lp) for lp, a in zip(logprobs, advantages, strict=True) if lp]
    return sum(terms) / len(logprobs)


def write_refit_config(run_dir: Path, cfg: Config, model: Path) -> Path:
    data = _served(cfg, model, f"{cfg.model_name}-refit").model_dump(mode="json")
    data["run"] = f"{cfg.run}-refit"[:64]
    path = GrpoStepLayout(RunLayout(run_dir)).refit_config
    with atomic_path(path) as tmp:
        tmp.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refit_and_compare(
    run_dir: Path, cfg: Config, model: Path, step_rows: list[dict], advantages: list[float]
) -> dict:
    """Serve the starting weights and the stepped ones; what the engine says of each row."""
    files = GrpoStepLayout(RunLayout(run_dir))
    stepped = files.model
    before = engine_logprobs(cfg, model, "policy", step_rows, files.engine_log("before"))
    after = engine_logprobs(cfg, stepped, "policy", step_rows, files.engine_log("after"))
    trainer_before = [r["logprobs_before"] for r in step_rows]
    trainer_after = [r["logprobs_after"] for r in step_rows]
    best = max(range(len(step_rows)), key=lambda i: (advantages[i], -i))
    parity_after = _max_abs(trainer_after, after)
    moved = _max_abs(before, after)
    objective = (objective_of(before, advantages), objective_of(after, advantages))
    result = {
        "model_dir": str(stepped),
        "config": str(write_refit_config(run_dir, cfg, stepped)),
        "rewarded_row": best,
        "engine_logprob_before": [sum(x) for x in before],
        "engine_logprob_after": [sum(x) for x in after],
        "engine_objective_before": objective[0],
        "engine_objective_after": objective[1],
        "engine_moved_max_abs": moved,
        "parity_after_max_abs": parity_after,
        # the engine serves the stepped weights: it scores as the stepped trainer does, not as
        # the starting weights did, and the step's objective rose on it
        "acknowledged": parity_after <= PARITY_BOUND < moved and objective[1] > objective[0],
    }
    parity = _max_abs(trainer_before, before)
    if not (math.isfinite(parity) and math.isfinite(parity_after)):
        raise TrainError(f"trainer/engine log probabilities not finite: {parity}, {parity_after}")
    return {"logprob_parity_max_abs": parity, "refit": result}

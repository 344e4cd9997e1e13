"""What a rollout's text depends on: the generation fingerprint (gen_key) that decides which
journal records are reused, and the per-task seed (task_seed)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rewardprof.core.config import MAX_NUM_REPEATS, Config

# How a rollout's seed derives from its task (task_seed below). Part of gen_key: records made
# under another scheme are stale (not reused, regenerated), so one shard never mixes schemes.
#   1: 15 bits of sha256 << 16 (the first scheme: 2^15 distinct bases, shared at scale)
#   2: 51 bits of sha256 << 12, rollout index in the low 12 bits (docs/robustness.md)
SEED_SCHEME = 2
ROLLOUT_BITS = 12  # K <= 2^12 (config: MAX_NUM_REPEATS)
assert MAX_NUM_REPEATS <= 1 << ROLLOUT_BITS
_BASE_MASK = ((1 << 63) - 1) & ~((1 << ROLLOUT_BITS) - 1)


def _gen_spec(cfg: Config, model: str) -> dict[str, Any]:
    s = cfg.sampling
    return {
        "model": model,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "max_tokens": s.max_tokens,
        "seed": s.seed,
        "extra_body": cfg.engine.extra_body,
    }


def _fingerprint(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def gen_key(cfg: Config, model: str) -> str:
    """Fingerprint of what a rollout's text depends on; records of another key are not reused.
    return_token_ids (in extra_body or engine.return_token_ids) only adds token ids to the
    response, never changes the text: it is left out."""
    spec = _gen_spec(cfg, model)
    spec["extra_body"] = {k: v for k, v in spec["extra_body"].items() if k != "return_token_ids"}
    spec["seed_scheme"] = SEED_SCHEME
    return _fingerprint(spec)


def task_seed(base_seed: int, task_id: str) -> int:
    """Rollout r of a task samples with seed task_seed + r (vLLM gives choice j seed + j).

    Bits 12..62 of the seed are the top 51 bits of sha256("<base_seed>:<task_id>"), the low 12
    bits are 0 and take r < 2^12: task_seed + r <= 2^63 - 1 (vLLM takes a signed 64-bit seed),
    and two tasks share seeds only when their 51-bit bases collide (docs/robustness.md)."""
    digest = hashlib.sha256(f"{base_seed}:{task_id}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") >> 1) & _BASE_MASK


def wants_token_ids(cfg: Config) -> bool:
    """Whether requests carry return_token_ids: true (engine.return_token_ids; null: serve
    mode only, where the engine is always vLLM)."""
    flag = cfg.engine.return_token_ids
    return cfg.engine.mode == "serve" if flag is None else flag

"""Group-relative advantages of a batch of rollouts, as GRPO computes them.

Two variants:
- `grpo` (default): per group (one task's rollouts), (reward - group mean) / (group std + eps),
  with the unbiased std, as TRL's GRPOTrainer does with scale_rewards="group".
- `reinforce_pp`: Reinforce++-style with a group baseline, as NeMo RL offers: (reward - group mean)
  divided by the std of those centred rewards over the whole batch (not per group).
A group whose rewards are all equal carries no signal: its advantages are exactly 0 in both
variants. A task the profile dropped gets advantages exactly 0 whatever its rewards, so it adds
nothing to the gradient (a control).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

VARIANTS = ("grpo", "reinforce_pp")
EPS = 1e-4  # TRL's epsilon in the std division


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _std_unbiased(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    m = _mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def group_advantages(
    groups: Sequence[Sequence[float]], kept: Sequence[bool], variant: str = "grpo"
) -> list[list[float]]:
    """One list of advantages per group (same order as its rewards)."""
    if variant not in VARIANTS:
        raise ValueError(f"advantage variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    centred = []
    for rewards, keep in zip(groups, kept, strict=True):
        m = _mean(rewards)
        flat = all(r == rewards[0] for r in rewards)
        centred.append([0.0 if (flat or not keep) else r - m for r in rewards])
    if variant == "grpo":
        scales = [_std_unbiased(rewards) + EPS for rewards in groups]
    else:
        active = [c for c in centred for c in c]
        scale = _std_unbiased(active) + EPS if active else 1.0
        scales = [scale] * len(groups)
    return [[c / s if c else 0.0 for c in cs] for cs, s in zip(centred, scales, strict=True)]

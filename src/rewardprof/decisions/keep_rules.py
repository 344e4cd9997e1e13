"""The export's keep rules as a pure function of per-task columns, and the same rules applied to
every way a task's unknown rollouts could still turn out.

Rules (config `export`, in this order; a dropped task counts under the first rule that drops
it; `REASONS` names them):

* `no_rollouts`: fewer than `min_rollouts` scored rollouts (or none)
* `undecided_by_failures`: only with `on_undecided: drop`; see below
* `all_fail` / `all_pass`: no reward variance (every scored rollout got the same reward) and
  that reward fails / passes. A partial-credit task with rewards {0, 0.5} has pass rate 0 but
  varying rewards, hence GRPO signal, and is kept.
* `below_min_pass_rate`, `above_max_pass_rate`: the pass rate outside the band
* `low_grpo_signal`: the plug-in signal below `min_grpo_signal`
* `low_expected_signal`: the posterior expected signal below `min_expected_signal`
* `low_signal_probability`: the posterior P(signal >= profile.signal_threshold) below
  `min_signal_probability`
* `predicted_drop_at_k`: adaptive sampling stopped the task early with the decision "drop" at
  num_repeats, and no rule above drops it on the rollouts it got
* `zero_target_share`: the label's target share is 0

Undecided by failures. A task with u unknown rollouts (failed or missing: expected minus
scored) would have been decided on n + u rollouts. `decision_range` applies the rules to every
completion of the unknowns (j more passes for j = 0..u; for rewards other than 0/1 also "all
equal to what was seen" and "some other value"), and a task whose keep/drop differs between
completions is undecided: its decision rests on the survivors alone. The posterior rules are
evaluated as they are in every completion (a posterior already widens with fewer rollouts); so
is `min_grpo_signal` for non-0/1 rewards (a new value's effect on it is not enumerable). The
same enumeration with u = num_repeats - n is adaptive sampling's `exact` stopping test.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

REASONS = [
    "no_rollouts",
    "undecided_by_failures",
    "all_fail",
    "all_pass",
    "below_min_pass_rate",
    "above_max_pass_rate",
    "low_grpo_signal",
    "low_expected_signal",
    "low_signal_probability",
    "predicted_drop_at_k",
    "zero_target_share",
]
KEEP = -1
_UNDECIDED = REASONS.index("undecided_by_failures")
_ZERO_SHARE = REASONS.index("zero_target_share")

# columns: num_rollouts, pass_rate (the configured column), has_variance, grpo_signal,
# post_signal, post_p_signal, label (only what the configured rules use must be present)
Columns = Mapping[str, np.ndarray]


def _need(cols: Columns, name: str, rule: str) -> np.ndarray:
    if name not in cols:
        raise KeyError(f"export.{rule} needs the profile column {name!r}: profile the run again")
    return np.asarray(cols[name], dtype=float)


def drop_reasons(
    ex,
    cols: Columns,
    undecided: np.ndarray | None = None,
    decided: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """Per task: KEEP (-1) or the index in REASONS of the first rule that drops it. `ex` is the
    export config; `undecided` marks tasks whose decision rests on the survivors (they are
    dropped under on_undecided: drop, and never dropped by a later rule under keep).
    `decided`: (stopped early, keep) of adaptive sampling, whose decision at num_repeats was
    settled on fewer rollouts: a kept one is not dropped by the rules on those rollouts, a
    dropped one counts under the first rule that drops it, else `predicted_drop_at_k`."""
    rate = np.asarray(cols["pass_rate"], dtype=float)
    n = np.asarray(cols["num_rollouts"], dtype=float)
    var = np.asarray(cols["has_variance"], dtype=bool)
    rules: list[np.ndarray | None] = [
        (n < ex.min_rollouts) | np.isnan(rate),
        (undecided if ex.on_undecided == "drop" else None) if undecided is not None else None,
        (~var & (rate == 0)) if ex.drop_all_fail else None,
        (~var & (rate == 1)) if ex.drop_all_pass else None,
        (rate < ex.min_pass_rate) if ex.min_pass_rate is not None else None,
        (rate > ex.max_pass_rate) if ex.max_pass_rate is not None else None,
        ~(_need(cols, "grpo_signal", "min_grpo_signal") >= ex.min_grpo_signal)
        if ex.min_grpo_signal is not None
        else None,
        ~(_need(cols, "post_signal", "min_expected_signal") >= ex.min_expected_signal)
        if ex.min_expected_signal is not None
        else None,
        ~(_need(cols, "post_p_signal", "min_signal_probability") >= ex.min_signal_probability)
        if ex.min_signal_probability is not None
        else None,
        (decided[0] & ~decided[1]) if decided is not None else None,
        _zero_share(cols, ex.target_share),
    ]
    protected = np.zeros(len(rate), dtype=bool)  # never dropped by the rules on the counts
    if undecided is not None and ex.on_undecided == "keep":
        protected |= undecided
    if decided is not None:
        protected |= decided[0] & decided[1]
    reason = np.full(len(rate), KEEP, dtype=np.int64)
    for i, mask in enumerate(rules):
        if mask is None:
            continue
        if _UNDECIDED < i < _ZERO_SHARE:
            mask = mask & ~protected
        reason[(reason == KEEP) & mask] = i
    return reason


def _zero_share(cols: Columns, share: dict[str, float]) -> np.ndarray | None:
    zero = [lbl for lbl, s in share.items() if s == 0]
    if not zero:
        return None
    return np.isin(np.asarray(cols["label"]), zero)


PosteriorFn = Callable[[np.ndarray, np.ndarray], Mapping[str, np.ndarray]]


@dataclass(frozen=True)
class OpenTasks:
    """Tasks as they stand (the rules' columns, passes) with `unknown` rollouts still to come or
    lost to failures; `binary`: the task's rewards are 0/1 (their completions are enumerable)."""

    cols: Columns
    num_passed: np.ndarray
    unknown: np.ndarray
    binary: np.ndarray


def completions(
    tasks: OpenTasks, group_size: int, posterior_fn: PosteriorFn | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Every completion of every task's unknown rollouts: (owner task position per state, the
    states' columns). A task without unknowns has one state, itself. posterior_fn(n, c), if
    given, recomputes post_* columns for the completed counts; else they are carried over."""
    cols = tasks.cols
    n = np.asarray(cols["num_rollouts"], dtype=np.int64)
    c = np.asarray(tasks.num_passed, dtype=np.int64)
    u = np.maximum(np.asarray(tasks.unknown, dtype=np.int64), 0)
    var = np.asarray(cols["has_variance"], dtype=bool)
    binary = np.asarray(tasks.binary, dtype=bool)
    # binary tasks: j = 0..u more passes; other tasks also one "all equal to what was seen" state
    extra = (~binary & ~var & (u > 0)).astype(np.int64)
    per_task = u + 1 + extra
    owner = np.repeat(np.arange(len(n)), per_task)
    first = np.cumsum(per_task) - per_task
    j = np.arange(len(owner)) - first[owner]
    is_equal_state = extra[owner].astype(bool) & (j == u[owner] + 1)
    rate_now = np.asarray(cols["pass_rate"], dtype=float)[owner]
    j = np.where(is_equal_state, np.where(rate_now >= 1, u[owner], 0), j)
    n2 = n[owner] + u[owner]
    c2 = c[owner] + j
    with np.errstate(invalid="ignore", divide="ignore"):
        rate2 = np.where(n2 > 0, c2 / np.maximum(n2, 1), np.nan)
    var_bin = (c2 > 0) & (c2 < n2)
    var2 = np.where(binary[owner], var_bin, var[owner] | ((u[owner] > 0) & ~is_equal_state))
    out: dict[str, np.ndarray] = {k: np.asarray(v)[owner] for k, v in cols.items()}
    out["num_rollouts"] = n2
    out["pass_rate"] = np.where(u[owner] > 0, rate2, rate_now)
    out["has_variance"] = var2
    if "grpo_signal" in cols:
        plug_in = 1.0 - rate2**group_size - (1.0 - rate2) ** group_size
        out["grpo_signal"] = np.where(binary[owner] & (u[owner] > 0), plug_in, out["grpo_signal"])
    if posterior_fn is not None:
        out.update(posterior_fn(n2, c2))
    return owner, out


def decision_range(
    ex, tasks: OpenTasks, group_size: int, posterior_fn: PosteriorFn | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(can_keep, can_drop) per task over every completion of its unknown rollouts."""
    owner, states = completions(tasks, group_size, posterior_fn)
    keep = drop_reasons(ex, states) == KEEP
    size = len(np.asarray(tasks.cols["num_rollouts"]))
    can_keep = np.bincount(owner, weights=keep, minlength=size) > 0
    can_drop = np.bincount(owner, weights=~keep, minlength=size) > 0
    return can_keep, can_drop

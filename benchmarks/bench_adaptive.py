"""Adaptive sampling: rollouts used and decisions, simulated over binomial sampling paths.

    python benchmarks/bench_adaptive.py            # 20,000 tasks per distribution, markdown table
    python benchmarks/bench_adaptive.py --small    # smoke size: one result line
    python benchmarks/bench_adaptive.py --scenarios   # small labels, pooled shapes, drift,
                                                      # off-family, partial credit + the audit
    python benchmarks/bench_adaptive.py --warm-start  # a new checkpoint, warm-started from the
                                                      # earlier one's profile (K = 16)
    python benchmarks/bench_adaptive.py --shapes      # exact vs bayes at the defaults, audit
                                                      # included, exports compared with fixed K

No engine: every task gets a true pass rate p from a distribution and one path of K = 16
Bernoulli(p) outcomes (rollout r of a task is the same draw in every mode, as rollout r has the
same seed in a fixed-K and an adaptive run). Modes, run by the package's round planner
(rewardprof.decisions.planning.round_plan: ask what to sample, reveal it, repeat) under the export's
default keep rules (drop tasks with no reward variance, i.e. all-fail or all-pass at K):

* fixed: all 16 rollouts, decision by the rules at K = 16
* exact: rollouts in rounds (2, then 2 more at a time) until the decision at 16 is settled
* for comparison, fixed K = 4 with the default rules, and with the uncertainty-aware rule
  instead (export.min_signal_probability: 0.5, drop_all_fail/drop_all_pass off) under the
  prior fitted on those 4 rollouts
* bayes(delta): as the workflow runs it (adaptive_runs.py): exact's rounds up to
  min_rollouts = 4, the label's priors fitted on them with its stopping threshold
  (decisions/planning/stop_budget.py), then the rounds, a task the rules leave open stopping when
  its P(flip) under the fit is at most the threshold; the audit sample (3 %) included

Reported per distribution and mode: share of the fixed run's rollouts used, agreement with the
fixed run's decisions, and accuracy against the truth (keep iff the true GRPO signal at
G = profile.group_size = 8 is >= 0.1). Distributions: Beta(0.5, 0.5); 50 % p = 0, 20 % p = 1,
30 % uniform; and the default run's shape: the mixture prior fitted on the 30 tasks of the
default run's profile (README: 24 tasks 0/4, 4 tasks 1/4, 1 task 2/4, 1 task 4/4).
Targets: exact agrees 100 % and uses <= 0.55 on Beta(0.5, 0.5); bayes at delta 0.02 agrees
>= 98 % and uses <= 0.70 on the 50/20/30 mix.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rewardprof.core.config import Export
from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records
from rewardprof.decisions.planning.round_plan import plan as adaptive_plan
from rewardprof.decisions.planning.stop_tests import (
    EXACT_FIRST_ROUND,
    keep_at,
    posterior_fn_for,
)
from rewardprof.decisions.priors.posterior import fit_prior, prior_as_posterior

try:  # run as a script: benchmarks/ is on sys.path
    import adaptive_runs as runs_
    import warm_start_scenarios as warm
    from adaptive_scenarios import SCENARIOS
    from adaptive_scenarios import simulate as simulate_scenario
except ImportError:  # imported as benchmarks.bench_adaptive
    from benchmarks import adaptive_runs as runs_
    from benchmarks import warm_start_scenarios as warm
    from benchmarks.adaptive_scenarios import SCENARIOS
    from benchmarks.adaptive_scenarios import simulate as simulate_scenario

K = 16
GROUP_SIZE = 8
ROUND = 2
DELTAS = (0.01, 0.02, 0.05)
# the default run's profile (README "A run"): pass counts out of 4 of its 30 tasks
DEFAULT_RUN_COUNTS = [0] * 24 + [1] * 4 + [2] + [4]


def _default_run_shape(rng: np.random.Generator, size: int) -> np.ndarray:
    prior = fit_prior(np.full(len(DEFAULT_RUN_COUNTS), 4), np.array(DEFAULT_RUN_COUNTS))
    return prior_as_posterior(prior).sample(rng, size)


def _mix(rng: np.random.Generator, size: int) -> np.ndarray:
    u = rng.random(size)
    return np.where(u < 0.5, 0.0, np.where(u < 0.7, 1.0, rng.random(size)))


DISTRIBUTIONS = {
    "Beta(0.5, 0.5)": lambda rng, size: rng.beta(0.5, 0.5, size),
    "50% p=0 / 20% p=1 / 30% uniform": _mix,
    "default run's shape": _default_run_shape,
}


def run_adaptive(
    passes: np.ndarray, settings: AdaptiveSettings, ex, priors=None
) -> tuple[np.ndarray, np.ndarray]:
    """The rollout stage's loop over the paths: ask the planner what to sample, reveal those
    outcomes, until every task is done; (rollouts used, keep) per task."""
    tasks = len(passes)
    labels = np.full(tasks, "bench", dtype=object)
    k = np.full(tasks, K)
    pos = idx = np.zeros(0, dtype=np.int64)
    while True:
        records = Records(pos, idx, passes[pos, idx].astype(float))
        plan = adaptive_plan(settings, ex, k, labels, records, priors)
        if plan.done.all():
            return plan.planned, plan.keep
        new_pos, new_idx = plan.missing(records)
        pos, idx = np.concatenate([pos, new_pos]), np.concatenate([idx, new_idx])


def simulate(name: str, tasks: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    p = DISTRIBUTIONS[name](rng, tasks)
    passes = (rng.random((tasks, K)) < p[:, None]).astype(np.int64)
    ex = Export()
    truth = (1 - p**GROUP_SIZE - (1 - p) ** GROUP_SIZE) >= 0.1
    fixed = keep_at(ex, K, passes.sum(axis=1), GROUP_SIZE)
    rows = [("fixed K=16", np.full(tasks, K), fixed)]
    # for comparison, fixed K = 4: the default rules, and instead of them the uncertainty-aware
    # rule (keep iff P(signal >= 0.1) >= 0.5) under the prior fitted on those 4 rollouts
    first4 = passes[:, :4].sum(axis=1)
    post = posterior_fn_for(
        fit_prior(np.full(tasks, 4), first4),
        level=0.95,
        group_size=GROUP_SIZE,
        signal_threshold=0.1,
    )
    rule = Export(min_signal_probability=0.5, drop_all_fail=False, drop_all_pass=False)
    rows.append(("fixed K=4", np.full(tasks, 4), keep_at(ex, 4, first4, GROUP_SIZE)))
    rows.append(
        (
            "fixed K=4, P(signal>=0.1)>=0.5",
            np.full(tasks, 4),
            keep_at(rule, 4, first4, GROUP_SIZE, posterior_fn=post),
        )
    )
    exact = AdaptiveSettings("exact", EXACT_FIRST_ROUND, ROUND, group_size=GROUP_SIZE)
    rows.append(("exact", *run_adaptive(passes, exact, ex)))
    labels = np.full(tasks, "bench", dtype=object)
    k = np.full(tasks, K)
    for delta in DELTAS:  # as the workflow runs it: first round, priors, thresholds, audit
        plan_b, _, _, _, _ = runs_.bayes_run(passes.astype(float), k, labels, ex, delta)
        rows.append((f"bayes delta={delta}", plan_b.planned, plan_b.keep))
    return [
        {
            "distribution": name,
            "mode": mode,
            "share_rollouts": float(used.sum() / (tasks * K)),
            "agreement": float((keep == fixed).mean()),
            "accuracy": float((keep == truth).mean()),
            "kept": float(keep.mean()),
        }
        for mode, used, keep in rows
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, kind, default in (("--tasks", int, 20_000), ("--seed", int, 0)):
        ap.add_argument(flag, type=kind, default=default)
    ap.add_argument("--small", action="store_true", help="smoke size (2,000 tasks), one line")
    ap.add_argument("--scenarios", action="store_true", help="adaptive_scenarios.py's table")
    ap.add_argument("--warm-start", action="store_true", help="warm_start_scenarios.py's table")
    ap.add_argument("--shapes", action="store_true", help="exact vs bayes on held-out shapes")
    ap.add_argument(
        "--delta", type=float, default=0.02, help="--scenarios: bayes' delta (default 0.02)"
    )
    args = ap.parse_args()
    if args.shapes:
        print_shapes(args.seed)
        return
    if args.scenarios:
        print_scenarios(args.seed, args.delta)
        return
    if args.warm_start:
        print_warm_start(2_000 if args.small else args.tasks, args.seed)
        return
    tasks = 2_000 if args.small else args.tasks
    t0 = time.perf_counter()
    results = [
        r for i, name in enumerate(DISTRIBUTIONS) for r in simulate(name, tasks, args.seed + i)
    ]
    wall = time.perf_counter() - t0
    pick = {(r["distribution"], r["mode"]): r for r in results}
    exact = pick[("Beta(0.5, 0.5)", "exact")]
    bayes = pick[("50% p=0 / 20% p=1 / 30% uniform", "bayes delta=0.02")]
    line = (
        f"adaptive: {tasks} tasks x K={K}: exact on Beta(0.5, 0.5) uses "
        f"{exact['share_rollouts']:.3f} "
        f"agrees {exact['agreement']:.4f}; bayes delta=0.02 on the 50/20/30 mix uses "
        f"{bayes['share_rollouts']:.3f} agrees {bayes['agreement']:.4f} ({wall:.1f} s)"
    )
    if not args.small:
        print(
            "| distribution | mode | share of fixed-K rollouts | agreement with fixed K "
            "| accuracy vs truth | kept |"
        )
        print("|---|---|---|---|---|---|")
        for r in results:
            print(
                f"| {r['distribution']} | {r['mode']} | {r['share_rollouts']:.3f} | "
                f"{r['agreement'] * 100:.2f} % | {r['accuracy'] * 100:.2f} % | "
                f"{r['kept'] * 100:.1f} % |"
            )
        print()
    print(line)


def _rare(rng: np.random.Generator, size: int) -> np.ndarray:
    u = rng.random(size)
    rare = rng.uniform(0.02, 0.05, size)
    return np.where(u < 0.5, 0.0, np.where(u < 0.8, rare, np.where(u < 0.9, 1.0, rng.random(size))))


# held out: none of them was looked at while the stopping rule was tuned
SHAPES = {
    "U-shaped, Beta(0.5, 0.5)": lambda rng, size: rng.beta(0.5, 0.5, size),
    "bimodal, rare successes (30 % at p 0.02-0.05)": _rare,
    "uniform": lambda rng, size: rng.random(size),
    "near 0.5, Beta(20, 20)": lambda rng, size: rng.beta(20, 20, size),
}
# label size -> runs (independent labels) per row
LABEL_SIZES = {10: 20, 30: 10, 120: 5, 1000: 2}


def print_shapes(seed: int) -> None:
    """exact and bayes (defaults: delta 0.02, audit 3 %) on one label per run, K = 16; each
    run's export against fixed K's export (adaptive_runs.py)."""
    print(
        "| shape | label size | runs | exact: share | bayes: share (audit included) "
        "| bayes: export agreement, mean (min) | audited tasks, all runs |"
    )
    print("|---|---|---|---|---|---|---|")
    ex = Export()
    for i, (name, draw) in enumerate(SHAPES.items()):
        for size, runs in LABEL_SIZES.items():
            shares_e, shares_b, agree, audited = [], [], [], 0
            for r in range(runs):
                rng = np.random.default_rng(seed + 1000 * i + r)
                p = draw(rng, size)
                outcomes = (rng.random((size, K)) < p[:, None]).astype(float)
                k = np.full(size, K)
                labels = np.full(size, "label", dtype=object)
                fixed = runs_.fixed_keep(outcomes, k, labels, ex)
                _, pos, _ = runs_.exact_run(outcomes, k, labels, ex)
                shares_e.append(len(pos) / (size * K))
                plan_b, pos, idx, audit, _ = runs_.bayes_run(outcomes, k, labels, ex, salt=f"{r}")
                shares_b.append(len(pos) / (size * K))
                kept = runs_.export_keep(ex, outcomes, k, labels, pos, idx, plan_b)
                agree.append(float((kept == fixed).mean()))
                audited += 0 if audit is None else int(audit.sum())
            print(
                f"| {name} | {size} | {runs} | {np.mean(shares_e):.3f} | {np.mean(shares_b):.3f} "
                f"| {np.mean(agree) * 100:.2f} % ({min(agree) * 100:.1f} %) | {audited} |",
                flush=True,
            )


def print_scenarios(seed: int, delta: float) -> None:
    """bayes at `delta` on the scenarios of adaptive_scenarios.py, one markdown row each."""
    print(
        "| scenario | tasks | test | agreement with fixed K | share of rollouts | audited "
        "| audit: flipped / audited [95 % interval] | true flip rate | inside |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for i, name in enumerate(SCENARIOS):
        r = simulate_scenario(name, seed + i, delta)
        lo, hi = r["audit_interval"]
        print(
            f"| {name} | {r['tasks']} | {r['modes']} | {r['agreement'] * 100:.2f} % "
            f"| {r['share_rollouts']:.3f} | {r['audited']} | {r['audit_flip'][0]} / "
            f"{r['audit_flip'][1]} [{lo:.3f}, {hi:.3f}] | {r['true_flip_rate']:.4f} "
            f"| {r['true_in_interval']} |",
            flush=True,
        )


def print_warm_start(tasks: int, seed: int, runs: int = 5) -> None:
    """exact, bayes with and without the earlier checkpoint's profile, and the oracle bound,
    one markdown row each over `runs` seeds (agreement: mean and min; share: mean and max):
    the developers' shapes, then the held-out movements."""
    print(
        "| earlier shape | new checkpoint | min_rollouts | mode | agreement with fixed K, "
        "mean (min) | share of rollouts (audit included), mean (max) |"
    )
    print("|---|---|---|---|---|---|")
    cases = [
        (shape, f"drift N(0, {sd}^2)", sd, warm.moved)
        for shape in ("50/20/30 mix", "Beta(0.5, 0.5)")
        for sd in warm.DRIFTS
    ]
    cases += [(shape, name, 0.5, later) for name, (shape, later) in warm.HELD_OUT.items()]
    for i, (shape, moved, sd, later) in enumerate(cases):
        for first in warm.FIRSTS:
            by_mode: dict[str, list[dict]] = {}
            for j in range(runs):
                for r in warm.simulate(shape, sd, tasks, seed + 10 * i + 1000 * j, first, later):
                    by_mode.setdefault(r["mode"], []).append(r)
            for mode, rows in by_mode.items():
                agree = [r["agreement"] for r in rows if r["agreement"] is not None]
                share = [r["share_rollouts"] for r in rows]
                said = f"{np.mean(agree) * 100:.2f} % ({min(agree) * 100:.1f} %)" if agree else "-"
                print(
                    f"| {shape} | {moved} | {first} | {mode} | {said} "
                    f"| {np.mean(share):.3f} ({max(share):.3f}) |",
                    flush=True,
                )


if __name__ == "__main__":
    main()

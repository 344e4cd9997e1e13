"""Coverage of `rewardprof estimate`'s useful-fraction interval, by simulation.

A pilot of T tasks is drawn from a label's shape of pass rates, each task scored on n rollouts;
estimate's prediction of the useful fraction at K (tools/estimate_signal.useful_prediction) is
checked against the truth of the shape, E[1 - p^K - (1 - p)^K]. Coverage = the share of pilots
whose 95 % interval holds the truth. Shapes: off-family (p in {0, 0.03, 0.6}, a third each: no
point masses plus one Beta fits it) and in-family (50 % p = 0, 20 % p = 1, 30 % uniform).
Pilots at n = K = 8 (the direct basis) and n = 4 for K = 8 (extrapolated beyond the pilot).

With --partial-credit: the adaptive share of rollouts estimate predicts for a partial-credit
label (rewards {0, 0.5, 1}, P(0.5) = 0.2: benchmarks/adaptive_scenarios.py) from a pilot of 300
tasks, against the planner run on 3,000 tasks at K = 16 (exact: first round 2; bayes, which
gives such a label the exact test: first round 4), and what the 0/1-pass prediction said.

    python benchmarks/bench_estimate.py            # markdown table on stdout
    python benchmarks/bench_estimate.py --partial-credit
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rewardprof.estimation.signal import useful_prediction


def off_family(rng, size):
    return rng.choice([0.0, 0.03, 0.6], size)


def in_family(rng, size):
    u = rng.random(size)
    return np.where(u < 0.5, 0.0, np.where(u < 0.7, 1.0, rng.random(size)))


SHAPES = {"off-family p in {0, 0.03, 0.6}": off_family, "in-family 50/20/30": in_family}


def truth(shape, k: int) -> float:
    """The shape's useful fraction at K, from a million draws (standard error < 0.0005)."""
    p = shape(np.random.default_rng(12345), 1_000_000)
    return float(np.mean(1.0 - p**k - (1.0 - p) ** k))


def coverage(shape, tasks: int, n: int, k: int, reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    true = truth(shape, k)
    hits, widths, errors, basis = 0, [], [], None
    for _ in range(reps):
        c = rng.binomial(n, shape(rng, tasks))
        pred = useful_prediction([(n, int(x)) for x in c], k)
        hits += pred["low"] <= true <= pred["high"]
        widths.append(pred["high"] - pred["low"])
        errors.append(pred["useful_fraction"] - true)
        basis = pred["basis"]
    return {
        "truth": true,
        "coverage": hits / reps,
        "mean_width": float(np.mean(widths)),
        "mean_error": float(np.mean(errors)),
        "basis": basis,
    }


def planned_share(rewards: np.ndarray, first: int) -> float:
    """Share of the K rollouts the planner's exact test samples (default rules)."""
    from rewardprof.core.config import Export
    from rewardprof.decisions.planning.round_plan import AdaptiveSettings, Records, plan

    tasks, k = rewards.shape
    settings = AdaptiveSettings("exact", first=first, round_size=2, group_size=8)
    labels = np.full(tasks, "a", dtype=object)
    pos = idx = np.zeros(0, np.int64)
    while True:
        rec = Records(pos, idx, rewards[pos, idx])
        out = plan(settings, Export(), np.full(tasks, k), labels, rec, None, 1.0)
        if out.done.all():
            return len(pos) / rewards.size
        more_pos, more_idx = out.missing(rec)
        pos, idx = np.concatenate([pos, more_pos]), np.concatenate([idx, more_idx])


def partial_credit() -> None:
    from adaptive_scenarios import K, _partial

    from rewardprof.core.config import Export
    from rewardprof.decisions.planning.stop_tests import exact_stop
    from rewardprof.decisions.priors.posterior import fit_prior
    from rewardprof.estimation.signal import expected_rollouts, variance_rollouts

    run = _partial(np.random.default_rng(3), 3000)
    print("| pilot n | mode (first round) | simulated share | predicted | 0/1-pass prediction |")
    print("|---|---|---|---|---|")
    for n in (4, 16):
        pilot = _partial(np.random.default_rng(7), 300)[:, :n]
        counts = np.stack([(pilot == v).sum(axis=1) for v in (0.0, 0.5, 1.0)], axis=1)
        prior = fit_prior(np.full(len(pilot), n), (pilot >= 1.0).sum(axis=1))
        for mode, first in (("exact", 2), ("bayes", 4)):

            def stop(m, cs):
                return exact_stop(Export(), np.full(len(cs), m), cs, K, 8)[0]

            old = expected_rollouts(prior, K, stop, first, 2) / K
            print(
                f"| {n} | {mode} ({first}) | {planned_share(run, first):.3f} | "
                f"{variance_rollouts(counts, K, first, 2) / K:.3f} | {old:.3f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=400, help="pilots per cell, direct basis")
    ap.add_argument("--reps-extrapolated", type=int, default=100, help="... extrapolated")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--partial-credit", action="store_true", help="the adaptive share instead")
    ap.add_argument("--shape", choices=list(SHAPES), help="one shape only")
    ap.add_argument("--pilot-n", type=int, choices=[4, 8], help="one pilot n only")
    args = ap.parse_args()
    if args.partial_credit:
        partial_credit()
        return
    print(
        "| shape | pilot tasks | pilot n | K | basis | pilots | truth | coverage of the "
        "95 % interval | mean width | mean error of the point | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, shape in SHAPES.items():
        if args.shape not in (None, name):
            continue
        for n in [x for x in (args.k, 4) if args.pilot_n in (None, x)]:
            for tasks in (100, 1000):
                reps = args.reps if n >= args.k else args.reps_extrapolated
                t0 = time.perf_counter()
                r = coverage(shape, tasks, n, args.k, reps, seed=tasks + n)
                secs = time.perf_counter() - t0
                print(
                    f"| {name} | {tasks} | {n} | {args.k} | {r['basis']} | {reps} | "
                    f"{r['truth']:.3f} | {r['coverage']:.1%} | {r['mean_width']:.3f} | "
                    f"{r['mean_error']:+.4f} | {secs:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()

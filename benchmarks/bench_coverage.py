"""Coverage of the profile's credible intervals (post_ci_low / post_ci_high), by simulation.

A label of T tasks is drawn from a shape of pass rates, each task scored on n rollouts; the
label's intervals are computed as the profile computes them (stages/profile.py: the family's
posterior under the fitted prior, decisions/priors/posterior.py, widened by the histogram prior,
decisions/priors/bins.py) and checked against each task's true p. Coverage = the share of tasks
whose interval holds their p, over all tasks of all labels drawn; also among tasks with
0 < p < 1 only (where the family's intervals went most wrong). "family only": the intervals
before widening, for comparison.

Shapes: in-family (50 % p = 0 / 20 % p = 1 / 30 % uniform; Beta(2, 5)); off-family (p in
{0, 0.03, 0.6}, a third each; two clusters: half hard (p = 0 or Beta(0.3, 6)), half easy
(p = 1 or Beta(6, 0.3))).

    python benchmarks/bench_coverage.py            # markdown table on stdout
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from rewardprof.decisions.priors.bins import widened
from rewardprof.decisions.priors.posterior import fit_prior, posterior_columns

LEVEL = 0.95


def mix(rng, size):
    u = rng.random(size)
    return np.where(u < 0.5, 0.0, np.where(u < 0.7, 1.0, rng.random(size)))


def beta25(rng, size):
    return rng.beta(2.0, 5.0, size)


def three_points(rng, size):
    return rng.choice([0.0, 0.03, 0.6], size)


def two_clusters(rng, size):
    hard = np.where(rng.random(size) < 0.5, 0.0, rng.beta(0.3, 6.0, size))
    easy = np.where(rng.random(size) < 0.5, 1.0, rng.beta(6.0, 0.3, size))
    return np.where(rng.random(size) < 0.5, hard, easy)


SHAPES = {
    "in-family 50/20/30": mix,
    "in-family Beta(2, 5)": beta25,
    "off-family p in {0, 0.03, 0.6}": three_points,
    "off-family two clusters": two_clusters,
}
# labels drawn per cell: about 3,000-18,000 tasks per cell
REPS = {30: 100, 300: 20, 3000: 6}


def label_intervals(n: np.ndarray, c: np.ndarray) -> dict[str, np.ndarray]:
    """The profile's intervals of one label (and the family's before widening)."""
    prior = fit_prior(n, c)
    cols = posterior_columns(prior, n, c, level=LEVEL, group_size=8, min_signal=0.1)
    lo, hi, flag = widened(n, c, cols["post_ci_low"], cols["post_ci_high"], LEVEL)
    return {
        "family": (cols["post_ci_low"], cols["post_ci_high"]),
        "profile": (lo, hi),
        "flag": flag,
    }


def cell(shape, tasks: int, n: int, reps: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    hits = {"family": [], "profile": []}
    interior, flag = [], None
    for _ in range(reps):
        p = shape(rng, tasks)
        nn = np.full(tasks, n)
        got = label_intervals(nn, rng.binomial(n, p))
        flag = got["flag"]
        for key in hits:
            lo, hi = got[key]
            hits[key].append((lo <= p + 1e-12) & (p <= hi + 1e-12))
        interior.append((p > 0) & (p < 1))
    inside = np.concatenate(interior)
    out = {"flag": flag}
    for key, rows in hits.items():
        covered = np.concatenate(rows)
        out[key] = covered.mean()
        out[f"{key}_interior"] = covered[inside].mean() if inside.any() else float("nan")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the labels per cell")
    args = ap.parse_args()
    print(
        "| shape | tasks per label | n | labels | profile (widened) | its tasks with 0 < p < 1 "
        "| family only | its tasks with 0 < p < 1 | interval_coverage | seconds |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, shape in SHAPES.items():
        for n in (4, 16):
            for tasks, reps in REPS.items():
                reps = max(1, round(reps * args.scale))
                t0 = time.perf_counter()
                r = cell(shape, tasks, n, reps, seed=tasks * 100 + n)
                print(
                    f"| {name} | {tasks} | {n} | {reps} | {r['profile']:.1%} | "
                    f"{r['profile_interior']:.1%} | {r['family']:.1%} | "
                    f"{r['family_interior']:.1%} | {r['flag']} | "
                    f"{time.perf_counter() - t0:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()

"""How much of bayes' first-round drain an engine that serves some requests first could fill: the
first round of bench_fleet.py's default case as a schedule of sequences on the fleet's slots,
in token-steps (every running sequence decodes one token a step; no I/O, no engine).

    python benchmarks/bench_first_round_order.py

640 tasks, every 5th answered 3x longer; each task's first round is two steps of two sequences
(exact's rounds up to min_rollouts 4: the second pair is asked for when the first returned),
lengths from the simulated engine's model (rewardprof.testing.sim_batching.LengthModel:
log-normal, median 600, sigma 1, times the task's factor, cut at max_tokens 8,192); 4 engines
of 64 slots. Orders compared, each a priority on the queue of waiting sequences:
- first come, first served (today: vLLM's default policy, and the simulated engine's);
- longest task first: by the task's remaining steps times its length factor, as a scheduler
  that has learnt which tasks answer long (from their first pair, or a warm start) could do with
  vLLM's `--scheduling-policy priority`;
- oracle: by the true remaining length of the task's chain, which no scheduler can know (each
  sequence's length is drawn when it is sampled).
Printed per draw of lengths (`--draws`): the first round's length, its slot utilization, and
its two lower bounds: the work over the slots, and the longest chain of two steps."""

from __future__ import annotations

import argparse
import heapq

from bench_fleet import LONG  # the prompts the simulated engine answers 3x longer

from rewardprof.testing.sim_batching import LengthModel


def lengths(tasks: int, draw: int, max_tokens: int) -> dict[tuple[int, int], int]:
    model = LengthModel(600.0, 1.0, ((LONG, 3.0),))
    out = {}
    for i in range(tasks):
        prompt = f"{LONG + ' ' if i % 5 == 0 else ''}What is {17 * i + 3} + {29 * i + 11}? #{draw}"
        for r in range(4):
            out[i, r] = min(max_tokens, model.length(prompt, r))
    return out


def first_round(seqs: dict[tuple[int, int], int], tasks: int, slots: int, order: str) -> float:
    """The first round's length in token-steps under `order`."""

    def chain(i: int, step: int) -> float:  # what is left of task i's chain from `step` on
        if order == "oracle":
            pairs = [max(seqs[i, 2 * s], seqs[i, 2 * s + 1]) for s in range(step, 2)]
            return float(sum(pairs))
        return (2 - step) * (3.0 if i % 5 == 0 else 1.0)

    queue: list[tuple[float, int, int, int]] = []  # (priority, arrival, task, rollout)
    arrivals = 0

    def ask(i: int, step: int) -> None:
        nonlocal arrivals
        for r in (2 * step, 2 * step + 1):
            arrivals += 1
            key = 0.0 if order == "first come" else -chain(i, step)
            heapq.heappush(queue, (key, arrivals, i, r))

    for i in range(tasks):
        ask(i, 0)
    running: list[tuple[float, int, int]] = []  # (ends at, task, rollout)
    now, left = 0.0, dict.fromkeys(range(tasks), 2)
    while queue or running:
        while queue and len(running) < slots:
            _, _, i, r = heapq.heappop(queue)
            heapq.heappush(running, (now + seqs[i, r], i, r))
        now, i, r = heapq.heappop(running)
        left[i] -= 1
        if left[i] == 0 and r < 2:  # the first pair is back: the second is asked for
            left[i] = 2
            ask(i, 1)
    return now


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=640)
    p.add_argument("--slots", type=int, default=4 * 64)
    p.add_argument("--max-tokens", type=int, default=8192)
    p.add_argument("--draws", type=int, default=3)
    p.add_argument(
        "--small", action="store_true", help="one draw of 64 tasks on 16 slots, one line"
    )
    args = p.parse_args()
    if args.small:
        seqs = lengths(64, 0, args.max_tokens)
        spans = {
            o: first_round(seqs, 64, 16, o) for o in ("first come", "longest task first", "oracle")
        }
        print(
            "first round: 64 tasks, 16 slots: "
            + ", ".join(f"{o} {s:,.0f}" for o, s in spans.items())
        )
        return
    columns = ["draw", "order", "first round (token-steps)", "slot utilization"]
    columns += ["work / slots", "longest chain"]
    print("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    for draw in range(args.draws):
        seqs = lengths(args.tasks, draw, args.max_tokens)
        work = sum(seqs.values()) / args.slots
        longest = max(
            max(seqs[i, 0], seqs[i, 1]) + max(seqs[i, 2], seqs[i, 3]) for i in range(args.tasks)
        )
        for order in ("first come", "longest task first", "oracle"):
            span = first_round(seqs, args.tasks, args.slots, order)
            row = [
                draw,
                order,
                f"{span:,.0f}",
                f"{work / span:.3f}",
                f"{work:,.0f}",
                f"{longest:,}",
            ]
            print("| " + " | ".join(map(str, row)) + " |")


if __name__ == "__main__":
    main()

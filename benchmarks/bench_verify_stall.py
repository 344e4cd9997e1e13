"""The longest event-loop stall while built-in environments verify adversarial completions.

    python benchmarks/bench_verify_stall.py            # 32,768-character completions
    python benchmarks/bench_verify_stall.py --small    # smoke size: 2,048 characters, one line

A rollout job's event loop serves every request of the job; a verifier that scans a completion
on it stops them all. Here each built-in environment verifies, one after another, completions
of --chars characters shaped to make naive extraction quadratic (nested boxes, endless tags,
runs of newlines or spaces after an answer marker, ...), through the same VerifyContext as a
rollout job (a pebble pool of --workers processes), while a ticker on the loop sleeps 1 ms at a
time and records how late it wakes. Target: the longest stall <= 50 ms for every environment.
Environments that act are verified on an episode whose last message is the completion.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from rewardprof.environments import make_environment
from rewardprof.environments.acting import ActingEnvironment, Episode
from rewardprof.environments.base import VerifyContext
from rewardprof.stages.rollout.verifying import make_pool
from rewardprof.testing.fake_server import FakeOpenAI

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
SINGLE_TURN = ["math", "mcq", "reasoning_gym", "code", "instruction_following", "llm_judge"]
ACTING = [
    "example_multi_step",
    "example_session_state_mgmt",
    "xlam_fc",
    "single_step_tool_use_with_argument_comparison",
    "math_with_code",
]


def adversarial(chars: int) -> dict[str, str]:
    """Completions of `chars` characters that defeat a naive scan, by name."""

    def fill(unit: str, head: str = "", tail: str = "") -> str:
        body = unit * ((chars - len(head) - len(tail)) // len(unit))
        return head + body + tail

    return {
        "nested_boxes": fill("\\boxed{"),
        "boxes_then_answer": fill("\\boxed{", tail="7}"),
        "newlines": fill("\n"),
        "answer_then_spaces": fill(" ", head="Answer: ", tail="x"),
        "letter_then_spaces": fill(" ", head="A: ", tail="x"),
        "box_of_spaces": fill(" ", head="\\boxed{", tail="5 . }"),
        "open_answer_tags": fill("<answer>"),
        "open_think_tags": fill("<think>"),
        "nested_text": fill("\\text{", head="\\boxed{"),
        "answer_is_runs": fill("the answer is "),
        "pronouns": fill("I believe "),
        "code_fences": fill("```python\n"),
        "open_parens": fill("("),
    }


def _row(env: str) -> dict:
    if env in SINGLE_TURN:
        line = (DATA / "environments" / f"{env}.jsonl").read_text().splitlines()[0]
        return json.loads(line)["row"]
    for name in ("example.jsonl", "example_rollouts.jsonl"):
        path = DATA / "nemo_gym" / env / name
        if path.exists():
            return json.loads(path.read_text().splitlines()[0])
    raise FileNotFoundError(env)


async def _ticker(lags: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - t0 - 0.001)


async def _verify(env, row: dict, completion: str, ctx: VerifyContext):
    if isinstance(env, ActingEnvironment):
        messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": completion}]
        episode = Episode(messages=messages, state=env.seed_state(row), prompt_messages=1)
        return await env.verify_episode(row, episode, ctx)
    return await env.verify(row, completion, ctx)


async def measure(env_name: str, options: dict, completions: dict[str, str], ctx) -> dict:
    env = make_environment(env_name, options)
    row = _row(env_name)
    lags: list[float] = []
    stop = asyncio.Event()
    ticker = asyncio.ensure_future(_ticker(lags, stop))
    statuses = {}
    t0 = time.perf_counter()
    try:
        for name, text in completions.items():
            await asyncio.sleep(0.005)  # the ticker is asleep when verification starts
            verdict = await _verify(env, row, text, ctx)
            await asyncio.sleep(0.005)  # and wakes after it, however long the loop was held
            statuses[name] = verdict.status if verdict.status != "ok" else verdict.reward
    finally:
        stop.set()
        await ticker
        await env.aclose()
    return {
        "environment": env_name,
        "max_stall_ms": round(1000 * max(lags, default=0.0), 1),
        "completions": len(completions),
        "wall_s": round(time.perf_counter() - t0, 2),
        "verdicts": statuses,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--chars", type=int, default=32768)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--target-ms", type=float, default=50.0)
    p.add_argument("--small", action="store_true", help="2,048 characters; one result line")
    args = p.parse_args()
    if args.small:
        args.chars = 2048
    completions = adversarial(args.chars)
    pool = make_pool(args.workers)
    rows = []

    def judge_answer(prompt: str, seed: int | None) -> str:
        return "VERDICT: INCORRECT"

    try:
        with FakeOpenAI(judge_answer) as judge:
            options = {"llm_judge": {"base_url": judge.base_url, "model": "fake-model"}}
            ctx = VerifyContext(pool=pool, timeout_s=120)
            for env in SINGLE_TURN + ACTING:
                result = asyncio.run(measure(env, options.get(env, {}), completions, ctx))
                rows.append(result)
                if args.small:
                    continue
                print(
                    f"{env:48s} max stall {result['max_stall_ms']:7.1f} ms over "
                    f"{result['completions']} completions ({result['wall_s']} s)",
                    flush=True,
                )
    finally:
        pool.stop()
        pool.join()
    worst = max(r["max_stall_ms"] for r in rows)
    if not args.small:
        print(json.dumps({"chars": args.chars, "worst_ms": worst, "rows": rows}, indent=1))
    print(
        f"verify-stall: worst {worst:.1f} ms over {len(rows)} environments x "
        f"{len(completions)} completions of {args.chars} chars (target {args.target_ms:g} ms)"
    )
    return 0 if args.small or worst <= args.target_ms else 1  # the smoke size checks no time


if __name__ == "__main__":
    sys.exit(main())

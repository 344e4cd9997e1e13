"""Verification helpers of the rollout stage: a verdict that can be trusted, and the worker
pool that runs CPU-heavy verifiers (warmed in the background while the first requests run)."""

from __future__ import annotations

import contextlib
import json

from rewardprof.core.kinds import OK, FailureKind
from rewardprof.environments import Environment, Verdict, VerifyContext, make_environment


def warm_worker(name: str, options_json: str) -> None:
    # warming is an optimisation: verification itself reports any real problem
    with contextlib.suppress(Exception):
        make_environment(name, json.loads(options_json)).warm()


def make_pool(workers: int):
    from pebble import ProcessPool  # lazy: only a shard with work starts the pool

    return ProcessPool(max_workers=workers)


async def verify(env: Environment, row: dict, text: str, ctx: VerifyContext) -> Verdict:
    try:
        verdict = await env.verify(row, text, ctx)
    except Exception as exc:  # a verifier bug is this rollout's failure, not the shard's
        return Verdict.failure(FailureKind.VERIFIER_ERROR, f"{type(exc).__name__}: {exc}"[:300])
    if verdict.status == OK and (verdict.reward is None or verdict.reward != verdict.reward):
        # "ok" without a reward would count as neither scored nor failed
        return Verdict.failure(
            FailureKind.VERIFIER_ERROR,
            f"environment {env.name!r} returned status ok with reward {verdict.reward}",
            **verdict.extras,
        )
    return verdict

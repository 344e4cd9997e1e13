"""L1: a request waiting in one replica's queue moves to a replica with free slots, and its
answer is the one it would have had (engine/moves.py, engine/client.py). Two simulated engines
(rewardprof.testing.sim_engine) in this process.

By construction: two requests whose prompts make a million tokens hold replica A's two slots for
the whole test, so the two short requests queued behind them (a replica's queue is kept within
its capacity: engine/sharing.py) can only be answered if they move to B, whose two free slots
take them (a move needs free slots by B's /metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp

from rewardprof.core.config import Rollout
from rewardprof.engine.balancer import Balancer
from rewardprof.engine.client import ChatClient
from rewardprof.testing.sim_batching import LengthModel
from rewardprof.testing.sim_engine import SimEngine, SimSettings

MODEL, SLOTS = "sim", 2
SETTINGS = SimSettings(
    model_names=(MODEL,),
    max_num_seqs=SLOTS,
    time_scale=1.0,
    lengths=LengthModel(median=20, sigma=0.0, factors=(("HOLD", 50_000.0),)),  # ~0.3 s; forever
)


def _body(text: str, seed: int) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "seed": seed, "n": 1}


SHORT = [_body(f"What is {i} + 1?", 100 + i) for i in range(SLOTS)]
HOLDERS = [_body(f"HOLD {i}", i) for i in range(2)]


async def _until(check, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def _answers(urls: list[str], bodies: list[dict]) -> list[str]:
    async with aiohttp.ClientSession() as session:
        client = ChatClient(session, urls[0], None, Rollout(), balancer=Balancer(urls, SLOTS))
        results = await asyncio.gather(*(client.complete(b) for b in bodies))
    return [r.choices[0].text for r in results]


def test_waiting_requests_move_to_a_free_replica_with_the_same_answers():
    with SimEngine(SETTINGS) as reference:
        expected = asyncio.run(_answers([reference.base_url], SHORT))

    with contextlib.ExitStack() as stack:
        a, b = (stack.enter_context(SimEngine(SETTINGS)) for _ in range(2))

        async def scenario():
            balancer = Balancer([a.base_url], SLOTS, admission=3.0)
            async with aiohttp.ClientSession() as session:
                client = ChatClient(session, a.base_url, None, Rollout(), balancer=balancer)
                await balancer.check_once(session)  # A's queue read: admission past its slots
                holders = [asyncio.ensure_future(client.complete(h)) for h in HOLDERS]
                await _until(lambda: a.stats()["running"] == SLOTS, "the holders to run")
                short = [asyncio.ensure_future(client.complete(s)) for s in SHORT]
                await _until(lambda: a.stats()["waiting"] == len(SHORT), "A's queue")
                assert balancer.rebalance() == 0  # nowhere to go yet
                balancer.set_urls([a.base_url, b.base_url])
                while not all(t.done() for t in short):  # each probe may move what B can take
                    await balancer.check_once(session)
                    await asyncio.sleep(0.05)
                got = [t.result().choices[0].text for t in short]
                stats_a, stats_b = a.stats(), b.stats()
                for h in holders:
                    h.cancel()
                await asyncio.gather(*holders, return_exceptions=True)
            return balancer, got, stats_a, stats_b

        balancer, got, stats_a, stats_b = asyncio.run(scenario())
    assert got == expected  # same body, same seed: the same answers
    assert balancer.moves == len(SHORT)
    assert stats_a["aborted_sequences"] == len(SHORT) and stats_a["aborted_slot_s"] == 0.0
    assert stats_a["sequences"] == 0 and stats_b["sequences"] == len(SHORT)
    assert max(r.in_flight for r in balancer.replicas.values()) == 0

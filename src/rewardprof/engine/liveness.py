"""Is the engine endpoint still there? A rollout job stops early when it is not.

Every HTTP attempt of the rollout client reports here: an answer of any kind (even a 500) shows
the server is up; a connection that cannot be made (refused, no route: `is_connect_failure`)
shows it is not. A connection cut mid-answer or a timeout says neither. The endpoint counts as
down when every attempt since the first connection error after the last answer has failed with
a connection error, no attempt has been in flight for longer than a connect takes (an attempt
that has waited `CONNECTED_AFTER_S` got a connection: generating is slow, connecting to a dead
port is not), and that has lasted `down_after_s` (`rollout.endpoint_down_s`). `watch()` checks
that on a clock, not when the next error comes: requests sleeping in their retry backoff do not
each wait out their own budget first.
With several replicas, a time when none is listed at all (`follow_listing`: the fleet's endpoints
file emptied) counts as down too, whatever is in flight: a request waiting for a replica to be
listed sits inside an attempt that looks connected, and would otherwise wait without limit.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from rewardprof.core.errors import RewardprofError

CONNECTED_AFTER_S = 5.0
T = TypeVar("T")


def is_connect_failure(detail: str) -> bool:
    """Whether a connection_error's detail (`<exception type>: <text>`, engine/http_retry.py)
    says no connection could be made at all: aiohttp's ClientConnectorError (refused, no route,
    unknown host). A cut connection (ServerDisconnectedError, ClientPayloadError) is not."""
    return detail.startswith(("ClientConnectorError", "ConnectionRefusedError"))


class EndpointDown(RewardprofError, RuntimeError):
    """Every request failed with a connection error for rollout.endpoint_down_s."""


class EndpointLiveness:
    def __init__(self, down_after_s: float, clock: Callable[[], float] = time.monotonic):
        self.down_after_s = down_after_s
        self.clock = clock
        self.failing_since: float | None = None  # first connection error after the last answer
        self.last_error: str | None = None
        self.connection_errors = 0  # since failing_since
        self._in_flight: dict[int, float] = {}  # attempt token -> when it started
        self._tokens = itertools.count()
        self._unlisted_for: Callable[[], float | None] = lambda: None

    def follow_listing(self, unlisted_for: Callable[[], float | None]) -> None:
        """`unlisted_for()`: seconds no replica has been listed, or None (Balancer.unlisted_for)."""
        self._unlisted_for = unlisted_for

    def unlisted(self) -> bool:
        return self._unlisted_for() is not None

    def attempt_started(self) -> int:
        """A new attempt; pass the returned token to attempt_ended."""
        token = next(self._tokens)
        self._in_flight[token] = self.clock()
        return token

    def attempt_ended(
        self, token: int, answered: bool, connection_error: str | None = None
    ) -> None:
        """Attempt `token` is over: `answered` when the server sent any HTTP answer;
        `connection_error` (its text) when the connection failed. Neither: a timeout or a
        cancelled attempt, which says nothing either way."""
        self._in_flight.pop(token, None)
        if answered:
            self.failing_since, self.connection_errors = None, 0
        elif connection_error is not None:
            if self.failing_since is None:
                self.failing_since = self.clock()
            self.connection_errors += 1
            self.last_error = connection_error

    def down_for(self) -> float | None:
        """Seconds the endpoint has been down by the rule above, else None."""
        unlisted = self._unlisted_for()
        if unlisted is not None:
            return unlisted
        if self.failing_since is None:
            return None
        now = self.clock()
        if any(now - started > CONNECTED_AFTER_S for started in self._in_flight.values()):
            return None
        return now - self.failing_since

    def is_down(self) -> bool:
        down = self.down_for()
        return down is not None and down >= self.down_after_s

    async def watch(self, tick_s: float = 1.0) -> float:
        """Return once the endpoint is down (seconds it has been down); cancel to stop."""
        tick = min(tick_s, max(self.down_after_s / 10, 0.05))
        while not self.is_down():
            await asyncio.sleep(tick)
        return self.down_for() or 0.0


async def run_while_alive(
    work: Awaitable[T],
    liveness: EndpointLiveness,
    what: str,
) -> T:
    """`await work`, unless the endpoint goes down first: then `work` is cancelled (and
    awaited, so its cleanup runs) and EndpointDown raised, one line that starts with `what`
    (e.g. the shard and the URL) and ends with the last connection error."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(liveness.watch())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        if not watcher.done():
            watcher.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)
    if not task.cancelled():  # it ended on its own: its result, or its exception
        return task.result()
    limit = f"(rollout.endpoint_down_s={liveness.down_after_s:g})"
    if liveness.unlisted():
        raise EndpointDown(
            f"{what}: no replica listed in the endpoints file for {watcher.result():.0f}s "
            f"{limit}; finished rollouts are journaled, rerun once the fleet lists a replica"
        )
    last = " ".join((liveness.last_error or "?").split())
    raise EndpointDown(
        f"{what} unreachable: every request failed with a connection error for "
        f"{watcher.result():.0f}s (rollout.endpoint_down_s={liveness.down_after_s:g}); last "
        f"error: {last}; finished rollouts are journaled, rerun once the endpoint is back"
    )

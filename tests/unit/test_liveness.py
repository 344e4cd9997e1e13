"""EndpointLiveness: when a rollout job decides its endpoint is gone (on a fake clock), and
run_while_alive stopping work that would otherwise wait out its retry backoffs."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from rewardprof.core.config import Rollout
from rewardprof.engine.balancer import Balancer
from rewardprof.engine.client import ChatClient
from rewardprof.engine.liveness import (
    CONNECTED_AFTER_S,
    EndpointDown,
    EndpointLiveness,
    is_connect_failure,
    run_while_alive,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _refused(live: EndpointLiveness, text: str = "ClientConnectorError: refused") -> None:
    live.attempt_ended(live.attempt_started(), answered=False, connection_error=text)


def test_default_limit_declares_a_dead_endpoint_down_within_90s():
    """With the defaults (endpoint_down_s 60, backoff up to 60 s), requests that keep being
    refused make the endpoint down 60 s after the first refusal: under 90 s, whatever the
    retry budget (1800 s) would allow each request."""
    defaults = Rollout()
    assert defaults.endpoint_down_s == 60
    clock = Clock()
    live = EndpointLiveness(defaults.endpoint_down_s, clock)
    _refused(live)
    for _ in range(59):
        clock.now += 1
        assert not live.is_down()
        if clock.now % 7 == 0:
            _refused(live, "ClientConnectorError: refused again")
    clock.now += 1
    assert live.is_down()
    assert live.down_for() == 60 < 90
    assert live.last_error == "ClientConnectorError: refused again"


def test_any_answer_resets_and_a_long_request_in_flight_means_connected():
    clock = Clock()
    live = EndpointLiveness(10, clock)
    _refused(live)
    clock.now += 9
    live.attempt_ended(live.attempt_started(), answered=True)  # even a 500 is an answer
    clock.now += 5
    assert live.down_for() is None
    _refused(live)
    slow = live.attempt_started()  # connected: generating for a long time
    clock.now += CONNECTED_AFTER_S + 20
    assert not live.is_down()
    live.attempt_ended(slow, answered=False)  # a timeout says nothing either way
    assert live.is_down()


def test_a_timeout_alone_never_makes_the_endpoint_down():
    clock = Clock()
    live = EndpointLiveness(1, clock)
    live.attempt_ended(live.attempt_started(), answered=False)
    clock.now += 100
    assert not live.is_down()


def test_run_while_alive_stops_work_sleeping_in_backoff_with_one_line():
    async def main() -> None:
        live = EndpointLiveness(0.2)
        cleaned = asyncio.Event()

        async def work() -> None:
            _refused(live, "ClientConnectorError: Cannot connect to host 127.0.0.1:9\n[refused]")
            try:
                await asyncio.sleep(3600)  # a retry backoff far longer than the limit
            finally:
                cleaned.set()

        with pytest.raises(EndpointDown) as err:
            await asyncio.wait_for(run_while_alive(work(), live, "0-of-1: engine X"), 60)
        assert cleaned.is_set()
        msg = str(err.value)
        assert "\n" not in msg
        assert msg.startswith("0-of-1: engine X unreachable")
        assert "Cannot connect to host 127.0.0.1:9 [refused]" in msg

    asyncio.run(main())


def test_run_while_alive_returns_the_result_of_work_that_finishes():
    async def main() -> int:
        live = EndpointLiveness(0.1)

        async def work() -> int:
            await asyncio.sleep(0)
            return 7

        return await run_while_alive(work(), live, "x")

    assert asyncio.run(main()) == 7


def test_only_a_connection_never_made_counts_as_the_endpoint_gone():
    assert is_connect_failure("ClientConnectorError: Cannot connect to host 127.0.0.1:9")
    assert not is_connect_failure("ClientPayloadError: Response payload is not completed")
    assert not is_connect_failure("ServerDisconnectedError: Server disconnected")


def test_no_replica_listed_counts_as_down_even_with_a_request_waiting_in_its_attempt():
    """The endpoints file emptied (the fleet stopped): a request waits for a replica inside an
    attempt that looks connected, yet the job stops on endpoint_down_s, with a typed one-line
    failure that says no replica is listed; a replica listed again resets the count."""
    clock = Clock()
    balancer = Balancer(["http://10.0.0.1:8000/v1"], capacity=4, clock=clock)
    live = EndpointLiveness(10, clock)
    live.follow_listing(balancer.unlisted_for)
    waiting = live.attempt_started()  # the request's attempt, waiting in acquire()
    balancer.set_urls([])
    clock.now += 9  # the waiting attempt is past CONNECTED_AFTER_S: it looks connected
    assert not live.is_down() and CONNECTED_AFTER_S < 9
    balancer.set_urls(["http://10.0.0.2:8000/v1"])  # a replica back: the count starts over
    clock.now += 100
    assert live.down_for() is None
    balancer.set_urls([])
    clock.now += 10
    assert live.is_down() and live.down_for() == 10
    live.attempt_ended(waiting, answered=False)


def test_a_client_request_on_an_emptied_fleet_fails_typed_within_the_limit():
    async def main() -> None:
        balancer = Balancer(["http://127.0.0.1:9/v1"], capacity=2)
        balancer.set_urls([])  # what `rewardprof fleet` writes on stop
        live = EndpointLiveness(0.3)
        async with aiohttp.ClientSession() as session:
            client = ChatClient(
                session, "http://127.0.0.1:9/v1", None, Rollout(), liveness=live, balancer=balancer
            )
            request = client.complete({"model": "m", "messages": [], "n": 1})
            t0 = time.monotonic()
            with pytest.raises(EndpointDown) as err:
                await asyncio.wait_for(run_while_alive(request, live, "0-of-1: engine X"), 30)
        assert time.monotonic() - t0 < 0.3 + 2  # the limit plus one watch tick, not forever
        assert balancer.waiters == 0  # the waiting request was cancelled, not left behind
        msg = str(err.value)
        assert msg.startswith("0-of-1: engine X: no replica listed in the endpoints file")
        assert "rollout.endpoint_down_s=0.3" in msg and "\n" not in msg

    asyncio.run(main())

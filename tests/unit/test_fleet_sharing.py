"""L0: several jobs sharing one fleet (engine/sharing.py, engine/balancer.py, engine/moves.py).

The jobs' own balancers against one simulated replica (rewardprof.testing.sim_batching's
continuous-batching model) in simulated time: each job reads the replica's gauges every 2 s at
its own moment, sends n=8 requests while its balancer admits them, and sends again as its
requests return. Waiting sequences stay within the replica's capacity for 1, 4 and 16 jobs,
where each job counting itself alone queues 960 (the test fails on a balancer without the
sharing); the slots stay busy and every job is served.
"""

from __future__ import annotations

import heapq
import os

import pytest

from rewardprof.engine.balancer import Balancer
from rewardprof.engine.moves import known_waiting
from rewardprof.engine.sharing import ClientLeases, Share, queue_room
from rewardprof.testing.sim_batching import BatchModel, LengthModel

URL, SLOTS, N, INTERVAL = "http://10.0.0.1:8000/v1", 64, 8, 2.0


def share_one_replica(jobs: int, stagger: float = 0.0, sharing: bool = True, horizon=3000.0):
    """(peak waiting, slot utilization, requests answered per job) of `jobs` jobs, job j
    starting at j x `stagger` s and counting the jobs started by then (its leases); without
    `sharing`, each job counts itself alone and never reads the gauges."""
    model = BatchModel(SLOTS, 0.03, 0.0005)
    lengths = LengthModel(400, 1.0)
    balancers = [Balancer([URL], capacity=SLOTS, admission=3.0) for _ in range(jobs)]
    left, owner, answered, ids = {}, {}, [0] * jobs, iter(range(10**9))

    def send(j: int, now: float) -> None:
        while (r := balancers[j].pick(N)) is not None:
            r.sent(N)
            rid = next(ids)
            model.submit(now, [((rid, k), lengths.length(f"p{rid}", k)) for k in range(N)])
            left[rid], owner[rid] = N, j

    def read(j: int, now: float) -> None:  # what check_once does: leases, then /metrics
        b = balancers[j]
        if not sharing:
            return
        b.set_jobs(sum(k * stagger <= now for k in range(jobs)))
        b.rank = j
        r = b.replicas[URL]
        r.queued, r.running, r.queue_read, r.sent_over, r.sent_since = (
            model.waiting,
            model.running,
            True,
            0,
            0,
        )
        r.turn = (b.rank - int(now // INTERVAL)) % b.jobs

    # job j starts at j x stagger and reads at once, then every INTERVAL at its own moment
    events = [(j * stagger, j) for j in range(jobs)]
    heapq.heapify(events)
    now = 0.0
    while now < horizon:
        nxt = model.next_event()
        now = events[0][0] if nxt is None or events[0][0] <= nxt else nxt
        model.advance(now)
        for rid, _ in model.drain():
            left[rid] -= 1
            if left[rid] == 0:
                j = owner.pop(rid)
                balancers[j].release(balancers[j].replicas[URL], N)
                answered[j] += 1
                send(j, now)
        if events[0][0] <= now:
            _, j = heapq.heappop(events)
            read(j, now)
            send(j, now)
            heapq.heappush(events, (now + INTERVAL, j))
    assert model.aborted_sequences == 0  # nothing cancelled: no running sequence lost
    return model.peak_waiting, model.busy_slot_s / (SLOTS * model.now), answered


@pytest.mark.parametrize("jobs", [1, 4, 16])
@pytest.mark.parametrize("stagger", [0.0, 0.7])
def test_waiting_sequences_stay_within_the_capacity_whatever_the_number_of_jobs(jobs, stagger):
    """stagger 0.7 s: jobs starting one after another, each counting only those started before
    it (a lease not there yet), the first ones sending as if alone."""
    peak_waiting, utilization, answered = share_one_replica(jobs, stagger)
    assert peak_waiting <= SLOTS
    assert utilization >= 0.93
    assert min(answered) >= 0.5 * sum(answered) / jobs  # every job served, none starved


def test_jobs_each_counting_themselves_alone_pile_up_a_queue():
    peak_waiting, _, _ = share_one_replica(16, sharing=False)
    assert peak_waiting == 16 * SLOTS - SLOTS  # each sends a full replica's slots: 960 wait


def test_shares_and_turns():
    assert Share.of(64, 3.0, 1) == Share(64, 192)
    assert Share.of(64, 3.0, 16) == Share(4, 12)
    assert queue_room(0, 0, 8, 64) and not queue_room(60, 0, 8, 64)  # alone: the whole room
    assert queue_room(56, 0, 8, 64, jobs=1) and not queue_room(57, 0, 8, 64, jobs=1)
    # 16 jobs, room 64: 4 jobs (64 // 16) may send, 8 each, the others wait for their turn
    assert [queue_room(0, 0, 8, 64, jobs=16, turn=t) for t in range(6)] == [True] * 4 + [False] * 2
    assert not queue_room(0, 8, 8, 64, jobs=16, turn=0)  # its part of the room is used
    assert not queue_room(50, 0, 8, 64, jobs=16, turn=0)  # room 14 < 2 requests: nobody


def test_jobs_are_counted_by_fresh_leases_and_ranked_by_name(tmp_path):
    a, b = (ClientLeases(tmp_path / "clients", stale_s=10) for _ in range(2))
    assert a.renew() == 1 and b.renew() == 2 and a.renew() == 2
    assert {a.rank, b.rank} == {0, 1}
    old = tmp_path / "clients" / "gone-job"
    old.touch()
    os.utime(old, (1, 1))  # a job killed long ago: its lease is stale
    assert a.renew() == 2
    b.release()
    assert a.renew() == 1 and a.rank == 0


def test_a_balancer_on_a_fleet_file_shares_by_its_leases(tmp_path):
    from rewardprof.engine.endpoints import EndpointsFile, write_endpoints

    path = tmp_path / "fleet" / "endpoints.json"
    write_endpoints(path, [URL], {URL: 32})
    file = EndpointsFile(path)
    other = ClientLeases(path.parent / "clients", stale_s=10)
    other.renew()
    leases = ClientLeases(path.parent / "clients", stale_s=10)
    b = Balancer(file.poll(), capacity=SLOTS, admission=3.0, endpoints_file=file, leases=leases)
    b.set_urls([URL], file.capacities)
    b.set_jobs(leases.renew())
    r = b.replicas[URL]
    assert (b.jobs, r.capacity, r.base, r.cap) == (2, 32, 16, 48)  # the file's capacity, halved


def test_moves_take_only_requests_known_to_wait_and_only_for_a_job_alone():
    b = Balancer([URL, "http://10.0.0.2:8000/v1"], capacity=4, admission=3.0)
    src, dst = b.replicas.values()
    for r, (running, queued) in ((src, (4, 3)), (dst, (0, 0))):
        r.running, r.queued, r.queue_read = running, queued, True
    old, small, big = (b.track(src, w) for w in (1, 1, 4))
    src.in_flight = 6
    assert known_waiting(src, set()) == []  # the newest (4) is not all waiting: nor any older
    b.untrack(big)
    src.in_flight = 2
    assert known_waiting(src, set()) == [small, old]
    b.set_jobs(2)  # another job on the fleet: src's queue may be its requests
    assert b.rebalance() == 0
    b.set_jobs(1)
    assert b.rebalance() == 2 and small.replica is dst and old.replica is dst


def test_a_starting_job_counts_the_jobs_started_with_it_before_its_first_request(tmp_path):
    import asyncio

    import aiohttp

    clients = tmp_path / "clients"
    leases = ClientLeases(clients, stale_s=10)
    b = Balancer([], capacity=SLOTS, admission=3.0, interval_s=0.2, leases=leases)
    b.set_jobs(leases.renew())

    async def start_with_another_job_joining():
        async with aiohttp.ClientSession() as session:
            starting = asyncio.ensure_future(b.start(session))
            await asyncio.sleep(0.05)
            assert not starting.done()  # it waits one health interval before any request
            ClientLeases(clients, stale_s=10).renew()  # a job started just after it
            await starting

    asyncio.run(start_with_another_job_joining())
    assert b.jobs == 2 and b.replicas == {}

"""L0: which waiting requests the balancer moves to free replicas (engine/moves.py), and when it
does not (work still waiting for a slot; a request already moved; nothing known of a queue)."""

from __future__ import annotations

from rewardprof.engine.balancer import Balancer
from rewardprof.engine.moves import free_slots, plan_moves

A, B, C = (f"http://10.0.0.{i}:8000/v1" for i in (1, 2, 3))


def _fleet(gauges: dict[str, tuple[int, int]], capacity: int = 4, admission: float = 3.0):
    """A balancer whose replicas' /metrics read (running, waiting) = gauges[url]."""
    b = Balancer(list(gauges), capacity=capacity, admission=admission)
    _read(b, gauges)
    return b


def _read(b: Balancer, gauges: dict[str, tuple[int, int]]) -> None:
    for url, (running, waiting) in gauges.items():
        r = b.replicas[url]
        r.running, r.queued, r.queue_read, r.moved_in, r.moved_out = running, waiting, True, 0, 0


def _send(b: Balancer, url: str, *weights: int):
    r = b.replicas[url]
    tickets = []
    for w in weights:
        r.in_flight += w
        tickets.append(b.track(r, w))
    return tickets


def test_the_newest_waiting_requests_move_to_the_free_replica_and_no_further():
    b = _fleet({A: (4, 3), B: (1, 0)})
    old, mid, new = _send(b, A, 2, 1, 2)
    assert free_slots(b.replicas[B]) == 3
    assert b.rebalance() == 2  # the newest (2), then the next that fits the 1 slot left
    assert new.replica is b.replicas[B] and mid.replica is b.replicas[B]
    assert old.replica is b.replicas[A] and not old.moved.is_set()
    assert new.moved.is_set() and mid.moved.is_set()
    a, bb = b.replicas[A], b.replicas[B]
    assert (a.in_flight, bb.in_flight) == (2, 3)
    assert (a.moved_out, bb.moved_in, free_slots(bb)) == (3, 3, 0)
    assert b.rebalance() == 0  # B has no free slot left until its gauges are read again


def test_no_move_while_work_waits_for_a_slot_or_when_turned_off():
    b = _fleet({A: (4, 3), B: (0, 0)})
    _send(b, A, 1, 1, 1)
    b.waiters = 1  # the job has more to send: the free replica gets that
    assert b.rebalance() == 0
    b.waiters, b.move_waiting = 0, False
    assert b.rebalance() == 0
    b.move_waiting = True
    assert b.rebalance() == 3


def test_a_request_moves_once_and_only_within_the_queue_and_the_cap():
    b = _fleet({A: (4, 1), B: (0, 0)})
    (big, small) = _send(b, A, 3, 1)
    assert [t for t, _ in plan_moves(list(b.replicas.values()))] == [small]  # 1 waits, not 3
    b = _fleet({A: (4, 8), B: (0, 0)}, admission=1.0)  # B's cap: 4 of this job's sequences
    tickets = _send(b, A, 1, 1, 1, 1, 1, 1)
    assert b.rebalance() == 4
    _read(b, {A: (0, 0), B: (4, 4)})  # now B queues and A is free: what moved once stays
    assert b.rebalance() == 0
    assert sorted(t.moves for t in tickets) == [0, 0, 1, 1, 1, 1]


def test_unknown_gauges_or_a_replica_out_move_nothing():
    b = _fleet({A: (4, 3), B: (0, 0), C: (0, 0)})
    _send(b, A, 1, 1, 1)
    b.replicas[B].running = None  # never read
    b.take_out(b.replicas[C], "gone")
    assert b.rebalance() == 0


def test_a_turn_of_an_episode_is_not_moved():
    """Its replica's prefix cache holds the episode so far: waiting there beats a cold start."""
    b = _fleet({A: (4, 3), B: (1, 0)})
    r = b.replicas[A]
    r.in_flight += 3
    pinned = [b.track(r, 1, pinned=True) for _ in range(3)]
    assert b.rebalance() == 0 and all(t.replica is r for t in pinned)
    movable = _send(b, A, 1)  # a single-turn request in the same queue still moves
    _read(b, {A: (4, 4), B: (1, 0)})
    assert b.rebalance() == 1 and movable[0].replica is b.replicas[B]

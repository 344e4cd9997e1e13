"""Moving waiting requests off a replica's queue, so no replica idles while another has a queue.

A rollout job keeps more sequences in flight per replica than the replica has slots
(engine.replica_admission: a request for n counts n until its last sample is out), so each
replica holds a queue. While the job has more to send that costs nothing: every slot that frees
is refilled. At the end of a round or of the run it does: a request waiting in one replica's
queue (behind long generations) cannot go to another replica that has gone idle, and the run's
tail is as long as the slowest queue. Measured on the simulated engine (4 replicas, bayes, one
shard with 3x longer generations): one replica busy alone for ~500 simulated seconds after the
first round while three idled.

So when nothing of the job waits for a slot, a request of this job on a replica whose /metrics
show a queue is moved to a replica with free slots: the first attempt is cancelled (the
connection closed: vLLM aborts the request, waiting or running) and the same body, same seed,
goes to the other replica (engine/client.py), so the rollouts come out as they would have and
are journaled once. Only requests known to be waiting move: vLLM schedules first come, first
served, so with the job alone on the fleet (engine/balancer.py moves nothing otherwise) the
queue's q sequences are its newest ones, and a request is waiting when it and every newer
request of the job on that replica add up to at most q (a request sharing a partly running n is
not). A request moves at most once; free slots and queues are the replicas' own gauges, read
with each health probe and corrected for the moves made since.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Protocol


class Replica(Protocol):
    """What a move reads and changes of a replica (engine/balancer.py's Replica)."""

    capacity: int
    cap: int
    in_flight: int
    running: int | None
    queued: int | None
    moved_in: int
    moved_out: int
    tickets: list[Ticket]


@dataclass(eq=False)
class Ticket:
    """One request of this job in flight on `replica` (`weight` sequences)."""

    replica: Replica
    weight: int
    moves: int = 0
    moved: asyncio.Event = field(default_factory=asyncio.Event)  # set: resend to .replica
    pinned: bool = False  # a turn of an episode: stays where its earlier turns are cached


def free_slots(r: Replica) -> int:
    """Slots of `r` nobody uses, by its last /metrics and the moves made since (0: unknown)."""
    if r.running is None or r.queued is None:
        return 0
    return r.capacity - r.running - r.queued - r.moved_in


def waiting(r: Replica) -> int:
    """Sequences waiting on `r` (every client's), by its last /metrics and the moves since."""
    return 0 if r.queued is None else max(0, r.queued - r.moved_out)


def known_waiting(src: Replica, taken: set[int]) -> list[Ticket]:
    """The job's requests on `src` whose sequences are all among the replica's waiting ones
    (they and every newer request of the job there add up to at most its queue: first come,
    first served), newest first, except those `taken` (still counted: still queued there)."""
    out, newer, queue = [], 0, waiting(src)
    for t in reversed(src.tickets):
        newer += t.weight
        if newer > queue:
            break
        if id(t) not in taken and not t.pinned:
            out.append(t)
    return out


def plan_moves(replicas: list[Replica]) -> list[tuple[Ticket, Replica]]:
    """(request, replica to move it to) pairs: the freest replica first takes the newest
    movable requests of the longest queue, while it has free slots, the request fits the queue
    (its sequences are among the waiting) and the replica's cap."""
    free = {id(r): free_slots(r) for r in replicas}
    queue = {id(r): waiting(r) for r in replicas}
    taken: set[int] = set()
    moves: list[tuple[Ticket, Replica]] = []
    for dst in sorted(replicas, key=lambda r: -free[id(r)]):
        load = dst.in_flight
        while free[id(dst)] > 0:
            room = min(free[id(dst)], dst.cap - load)
            best = None
            for src in sorted(replicas, key=lambda r: -queue[id(r)]):
                if src is dst or queue[id(src)] <= 0:
                    continue
                best = next(
                    (t for t in known_waiting(src, taken) if t.moves == 0 and t.weight <= room),
                    None,
                )
                if best is not None:
                    break
            if best is None:
                break
            taken.add(id(best))
            moves.append((best, dst))
            free[id(dst)] -= best.weight
            queue[id(best.replica)] -= best.weight
            load += best.weight
    return moves

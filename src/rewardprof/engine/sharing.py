"""Several jobs on one fleet: how many there are, and each one's share of a replica (`Replica`:
one job's view of one replica, what it may send there).

Every rollout job that reads an endpoints file holds a lease beside it: a file in
`<endpoints file's folder>/clients/` that it touches with each health probe and removes when it
ends. The leases touched within `stale_s` are the jobs on the fleet now (a job killed without
removing its lease stops counting once it is stale). A job that cannot write there counts the
others' leases and itself.

With J jobs, a job's share of a replica of `capacity` slots (engine/balancer.py admits by it):

- `base` = capacity / J sequences, sent whenever they fit: J jobs at their base fill the slots
  and queue nothing;
- past the base, up to `cap` = capacity x replica_admission / J (a request of n holds its n
  places until its last sample is out while the replica frees each slot as its sequence ends,
  which the margin refills), and only while the replica's queue stays within its capacity,
  counting each other job as sending what this one sent since the queue was read: the queue
  gauge (every job's sequences) plus J x this job's sends past its base since that reading, so
  the jobs together add at most what the queue has room for between two readings.

A request larger than its share still goes when the job has nothing on that replica (a job is
never starved); J jobs' queues are then bounded by J requests.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rewardprof.engine.moves import Ticket

log = logging.getLogger("rewardprof.engine")

IN, OUT = "in", "out"  # a replica taken in or out by a job (engine/balancer.py)
STALE_MIN_S = 10.0  # a lease older than this (or 5 health intervals) is a job gone


@dataclass(frozen=True)
class Share:
    """One job's part of one replica (module doc)."""

    base: int
    cap: int

    @classmethod
    def of(cls, capacity: int, admission: float, jobs: int) -> Share:
        jobs = max(1, jobs)
        base = max(1, math.ceil(capacity / jobs))
        return cls(base, max(base, math.ceil(capacity * admission / jobs)))


def queue_room(
    queued: int, sent_over: int, weight: int, capacity: int, jobs: int = 1, turn: int = 0
) -> bool:
    """Whether this job may send `weight` more sequences past its base to a replica whose queue
    holds `queued` (of `capacity` allowed), having sent `sent_over` past it since that reading.

    The room (capacity - queued) is split between k jobs, as many as it holds twice requests of
    this size (at most all J): the jobs whose rank is within k of `turn` (the reading's time
    slot, so the turns go round) may each send up to room / 2k, the others wait for their turn.
    Half the room, because the jobs read at different moments: a job reading just after the
    slot turned and one reading just before it may both send on about the same queue. The jobs
    together then add at most the room between two readings, whatever J is; a job alone takes
    all of it."""
    room = capacity - queued
    if max(1, jobs) == 1:
        return sent_over + weight <= room
    k = min(jobs, room // (2 * weight))
    return k > 0 and turn % jobs < k and sent_over + weight <= room // (2 * k)


@dataclass
class Replica:
    url: str  # .../v1
    capacity: int  # the server's slots (max_num_seqs)
    cap: int = 0  # most sequences this job sends it (its share of capacity x admission)
    base: int = 0  # sequences this job sends it whenever they fit (its share of the slots)
    jobs: int = 1  # jobs sharing it (engine/sharing.py)
    in_flight: int = 0  # sequences
    sent_over: int = 0  # sequences sent past `base` since its /metrics were read
    sent_since: int = 0  # sequences sent since then
    turn: int = 0  # this job's place in the turns to send past the base (engine/sharing.py)
    queued: int | None = None  # sequences waiting on it, all clients (its /metrics; None: unknown)
    queue_read: bool = False  # /metrics read once: until then no more than its capacity
    running: int | None = None  # sequences running on it, all clients (its /metrics)
    moved_in: int = 0  # sequences moved to it since its /metrics were read
    moved_out: int = 0  # sequences moved off it since then
    tickets: list[Ticket] = field(default_factory=list)  # this job's requests on it, oldest first
    done: int = 0  # requests answered
    errors: int = 0  # failed attempts
    failures: int = 0  # consecutive failed attempts
    state: str = IN
    listed: bool = True  # still in the configured list / endpoints file
    changed_at: float = 0.0
    last_error: str | None = None
    metrics_problem: str | None = None  # why samples of its last /metrics were ignored

    @property
    def chat_url(self) -> str:
        return self.url + "/chat/completions"

    def load(self) -> float:
        return self.in_flight / self.capacity

    def admits(self, weight: int) -> bool:
        """Whether a request of `weight` sequences may go to it now (module doc)."""
        total = self.in_flight + weight
        queued = max(0, (self.queued or 0) - self.moved_out)
        if total <= self.base or (self.in_flight == 0 and self.jobs == 1):
            # its share of the slots (alone, an idle replica takes any request), unless the
            # replica already holds a full queue: a job that started alone and sent before the
            # others' leases showed is over its share until that drains
            if not self.queue_read or self.running is None:
                return True
            return self.running + queued + self.sent_since + weight <= 2 * self.capacity
        if not self.queue_read:  # its queue unknown yet (read at once when the job starts)
            return False
        if self.in_flight and total > max(self.cap, 2 * weight):
            return False
        if queue_room(queued, self.sent_over, weight, self.capacity, self.jobs, self.turn):
            return True
        # a request too large for any room (over half the slots): on an empty queue, in turn
        return not self.in_flight and 2 * weight > self.capacity and not queued and not self.turn

    def share(self, capacity: int, admission: float, jobs: int) -> None:
        self.capacity, self.jobs = capacity, max(1, jobs)
        share = Share.of(capacity, admission, self.jobs)
        self.base, self.cap = share.base, share.cap

    def sent(self, weight: int) -> None:
        """`weight` sequences went to it (counted past the base: engine/sharing.py)."""
        self.sent_over += max(0, min(weight, self.in_flight + weight - self.base))
        self.sent_since += weight
        self.in_flight += weight


class ClientLeases:
    """This job's lease among a fleet's clients, and the count of fresh ones."""

    def __init__(self, directory: Path, stale_s: float, clock: Callable[[], float] = time.time):
        self.directory, self.stale_s, self.clock = Path(directory), stale_s, clock
        name = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.path = self.directory / name
        self._warned = False
        self.rank = 0  # this job's place among the fresh leases (by name)

    def renew(self) -> int:
        """Touch this job's lease; how many jobs hold a fresh lease (itself included)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self.path.touch()
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning(
                    "fleet clients: cannot write %s (%s): counting the others", self.path, exc
                )
        others = self.others()
        self.rank = sum(name < self.path.name for name in others)
        return len(others) + 1

    def others(self) -> list[str]:
        """Names of the other jobs' fresh leases."""
        now, names = self.clock(), []
        try:
            entries = list(os.scandir(self.directory))
        except OSError:
            return []
        for entry in entries:
            if entry.name == self.path.name:
                continue
            with contextlib.suppress(OSError):
                if now - entry.stat().st_mtime <= self.stale_s:
                    names.append(entry.name)
        return names

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()

"""The simulated engine's model: continuous batching, output lengths and outcomes (no I/O).

`BatchModel` is one replica's scheduler in simulated seconds, as vLLM's runs it:
`max_num_seqs` slots; every step decodes one token of every running sequence and takes
`step_base_s + step_per_seq_s * batch` seconds, so a fuller batch is slower per step but faster
per token; a sequence leaves its slot when its last token is out and the first waiting sequence
(first come, first served) takes the slot in the same instant. The choices of an `n`-sample
request are `n` sequences. Between two events (an arrival, a sequence finishing) the batch is
constant, so the model jumps from event to event instead of stepping (a fluid model: a sequence
entering mid-step starts at once; prefill costs nothing). `abort(rid)` drops a request's
sequences, waiting or running, as vLLM does when the client disconnects; the slot-seconds its
running sequences had used are counted as `aborted_slot_s` (work done for nothing). Admission
is bounded when `max_waiting` is set: a request whose sequences would push the waiting queue
past it is refused whole (the server answers 503 with Retry-After), never partly queued.

It counts busy slot-seconds (the integral of the batch size over time), so slot utilization is
`busy_slot_s / (max_num_seqs * elapsed)`, also per `bucket_s` of simulated time
(`busy_buckets`: where in a run the slots were idle) and up to the last arrival
(`busy_at_last_submit`: what follows it is the tail, when no more work can come).

What a completion is, as pure functions of (prompt, seed) so a rerun gives the same
completions and rewards: `output_length` (log-normal, a long tail, times a per-prompt factor),
`pass_rate` (per prompt: 40 % never, 20 % always, 40 % uniform in (0, 1)) and `solves`
(whether this seed's sample gets the right answer).
"""

from __future__ import annotations

import hashlib
import heapq
import math
import statistics
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field

_EPS = 1e-9
_NORMAL = statistics.NormalDist()


def unit_hash(*parts: object) -> float:
    """A number in (0, 1) fixed by `parts` (SHA-256; the same in every process and run)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return (int.from_bytes(digest[:8], "big") + 0.5) / 2**64


@dataclass(frozen=True)
class LengthModel:
    """Output tokens of a sample: log-normal with this median and sigma (sigma 1: the mean is
    1.65x the median and 1 sample in 20 is over 5x it), times `factor_of(prompt)`, at least 1."""

    median: float = 600.0
    sigma: float = 1.0
    factors: tuple[tuple[str, float], ...] = ()  # (prompt substring, factor): first match wins

    def factor_of(self, prompt: str) -> float:
        for needle, factor in self.factors:
            if needle in prompt:
                return factor
        return 1.0

    def length(self, prompt: str, seed: int | None) -> int:
        z = _NORMAL.inv_cdf(unit_hash("length", prompt, seed))
        return max(1, round(self.median * math.exp(self.sigma * z) * self.factor_of(prompt)))


def pass_rate(prompt: str) -> float:
    """The per-task probability of a correct sample: 0 for 40 % of prompts, 1 for 20 %, uniform
    in (0, 1) for the rest (a mix where adaptive sampling has something to decide)."""
    u = unit_hash("task", prompt)
    if u < 0.4:
        return 0.0
    if u < 0.6:
        return 1.0
    return unit_hash("rate", prompt)


def solves(prompt: str, seed: int | None) -> bool:
    """Whether the sample of `prompt` with `seed` is correct."""
    return unit_hash("outcome", prompt, seed) < pass_rate(prompt)


@dataclass
class BatchModel:
    max_num_seqs: int = 64
    step_base_s: float = 0.015
    step_per_seq_s: float = 0.0003
    max_waiting: int | None = None  # None: queue without bound (as vLLM)
    now: float = 0.0  # simulated seconds
    busy_slot_s: float = 0.0
    tokens: float = 0.0
    sequences_done: int = 0
    peak_running: int = 0
    peak_waiting: int = 0
    peak_in_system: int = 0  # running + waiting: what the clients have admitted at once
    last_idle_at: float | None = None  # when the batch last became empty
    last_submit_at: float | None = None  # the last arrival admitted
    busy_at_last_submit: float = 0.0
    bucket_s: float = 10.0
    busy_buckets: list[float] = field(default_factory=list)  # busy slot-s per bucket_s
    _progress: float = 0.0  # tokens every running sequence has made since time 0
    _running: list[tuple[float, int, Hashable]] = field(default_factory=list)  # heap
    _waiting: deque[tuple[Hashable, int]] = field(default_factory=deque)
    _finished: list[Hashable] = field(default_factory=list)
    _order: int = 0
    _started: dict[Hashable, float] = field(default_factory=dict)  # running key -> start time
    aborted_sequences: int = 0
    aborted_slot_s: float = 0.0  # slot-seconds of running sequences aborted (wasted)

    def step_time(self, batch: int) -> float:
        return self.step_base_s + self.step_per_seq_s * batch

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def submit(self, now: float, seqs: list[tuple[Hashable, int]]) -> bool:
        """Bring the model to `now`, then admit `seqs` ((key, output tokens) each) whole, or
        refuse them all (False) when they would push the waiting queue past `max_waiting`."""
        self.advance(now)
        free = self.max_num_seqs - len(self._running) if not self._waiting else 0
        if self.max_waiting is not None and len(self._waiting) + len(seqs) - free > (
            self.max_waiting
        ):
            return False
        self._waiting.extend((key, max(1, int(n))) for key, n in seqs)
        self.last_submit_at, self.busy_at_last_submit = self.now, self.busy_slot_s
        self._fill()
        return True

    def advance(self, now: float) -> None:
        """Run the batch up to `now` (simulated seconds); finished keys go to `drain()`."""
        while self._running:
            batch, step = len(self._running), self.step_time(len(self._running))
            to_next = (self._running[0][0] - self._progress) * step
            if self.now + to_next > now:
                self._elapse(max(0.0, now - self.now), batch, step)
                return
            self._elapse(max(0.0, to_next), batch, step)
            while self._running and self._running[0][0] <= self._progress + _EPS:
                key = heapq.heappop(self._running)[2]
                self._started.pop(key, None)
                self._finished.append(key)
                self.sequences_done += 1
            self._fill()
            if not self._running:
                self.last_idle_at = self.now
        self.now = max(self.now, now)

    def abort(self, now: float, rid: Hashable) -> int:
        """Drop the sequences of request `rid` (keys `(rid, j)`), waiting or running, at `now`;
        how many were dropped."""
        self.advance(now)
        waiting = [(k, n) for k, n in self._waiting if k[0] != rid]
        running = [e for e in self._running if e[2][0] != rid]
        dropped = len(self._waiting) - len(waiting) + len(self._running) - len(running)
        for e in self._running:
            if e[2][0] == rid:
                self.aborted_slot_s += self.now - self._started.pop(e[2], self.now)
        if dropped:
            self._waiting = deque(waiting)
            self._running = running
            heapq.heapify(self._running)
            self.aborted_sequences += dropped
            self._fill()
            if not self._running:  # the batch emptied by the abort: idle from now
                self.last_idle_at = self.now
        return dropped

    def next_event(self) -> float | None:
        """Simulated time of the next sequence to finish (None: nothing runs)."""
        if not self._running:
            return None
        step = self.step_time(len(self._running))
        return self.now + (self._running[0][0] - self._progress) * step

    def drain(self) -> list[Hashable]:
        """Keys of the sequences finished since the last call."""
        out, self._finished = self._finished, []
        return out

    def _elapse(self, dt: float, batch: int, step: float) -> None:
        t, end = self.now, self.now + dt
        while batch and t < end:  # the batch's slot-seconds, split over the buckets it spans
            i = int(t // self.bucket_s)
            upto = min(end, (i + 1) * self.bucket_s)
            if len(self.busy_buckets) <= i:
                self.busy_buckets.extend([0.0] * (i + 1 - len(self.busy_buckets)))
            self.busy_buckets[i] += batch * (upto - t)
            t = upto if upto > t else end
        self.now += dt
        self._progress += dt / step
        self.busy_slot_s += batch * dt
        self.tokens += batch * dt / step

    def _fill(self) -> None:
        while self._waiting and len(self._running) < self.max_num_seqs:
            key, length = self._waiting.popleft()
            self._order += 1
            heapq.heappush(self._running, (self._progress + length, self._order, key))
            self._started[key] = self.now
        self.peak_running = max(self.peak_running, len(self._running))
        self.peak_waiting = max(self.peak_waiting, len(self._waiting))
        self.peak_in_system = max(self.peak_in_system, len(self._running) + len(self._waiting))

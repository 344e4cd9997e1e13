"""Client-side balancing over replicas of one model (engine.base_url as a list, or
engine.endpoints_file).

- Least loaded: each request goes to the replica with the fewest sequences in flight relative
  to its capacity (the server's max_num_seqs: the endpoints file's per-replica `capacity`, else
  engine.replica_capacity; a request for n samples counts n). Bounded admission, shared fairly
  between the jobs on one fleet (engine/sharing.py): with J jobs (their leases beside the
  endpoints file) a job sends a replica up to capacity / J sequences, and past that up to
  capacity x engine.replica_admission / J only while the replica's own queue (vLLM's
  `vllm:num_requests_waiting` in /metrics, read with each health probe; every client's
  sequences) plus J times what this job sent past its base since that reading stays within the
  replica's capacity; else the request waits. Past the slots because the count is per request
  while the server frees a slot per sequence: a request of n holds n places until its last
  sample is out, most of its slots long free by then, and the queue refills them.
- The job's requests in flight follow the fleet: `admission()` (every listed replica's
  capacity) is how many workers the rollout job keeps (at least rollout.concurrency), so a
  larger fleet is filled without a config change.
- Out: a connection refused or cut (a replica killed, its node lost) takes the replica out at
  once; `fail_after` consecutive failed attempts (5xx, timeouts) take it out too. The client
  (engine/client.py) re-sends a request whose connection died to another replica at once, with
  the same body and seed, so its rollouts come out as they would have; the rollout is journaled
  once, when the answer arrives.
- Back: `watch()` probes every replica's /health each `interval_s`; a replica out that answers
  200 is taken back; one in that refuses the connection is taken out, one whose /health fails
  otherwise (slow under load) counts a failure toward `fail_after`. It also re-reads the endpoints
  file, adding and dropping replicas as the fleet publishes them.
- Moves: when nothing of the job waits for a slot (the end of a round or of the run) and the
  job is the fleet's only client (else a replica's queue may be another job's, and which of
  this job's requests wait is unknown), a request known to be waiting in one replica's queue is
  moved to a replica with free slots (engine/moves.py), so no replica idles while another works
  off a queue; engine.move_waiting turns it off.
- While no replica is in, requests still go to one that is out (round robin): their connection
  errors are what the endpoint's liveness (engine/liveness.py) counts to stop the job on
  rollout.endpoint_down_s, as with one endpoint. While none is listed at all (the endpoints file
  emptied: the fleet stopped), requests wait for the file to list one, and that time counts
  toward rollout.endpoint_down_s too (`unlisted_for`), so the wait has a limit.

`snapshot()` is what the rollout job's heartbeat carries per replica for `rewardprof status`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp

from rewardprof.core.config import Config
from rewardprof.core.redaction import public_url, redact
from rewardprof.engine.endpoints import EndpointsFile, health_url, metrics_url, replica_capacity
from rewardprof.engine.http_retry import AttemptError, read_bounded
from rewardprof.engine.metrics import RUNNING_GAUGE, WAITING_GAUGE, gauge_sum
from rewardprof.engine.moves import Ticket, plan_moves
from rewardprof.engine.sharing import IN, OUT, STALE_MIN_S, ClientLeases, Replica

if TYPE_CHECKING:
    from rewardprof.engine.session import Endpoint

log = logging.getLogger("rewardprof.engine")

METRICS_BYTES = 1 << 20  # vLLM's /metrics page is tens of kB; past this it is not read
CONNECT_FAILED = "connection refused"


class Balancer:
    def __init__(
        self,
        urls: list[str],
        capacity: int,
        fail_after: int = 3,
        interval_s: float = 2.0,
        endpoints_file: EndpointsFile | None = None,
        clock: Callable[[], float] = time.monotonic,
        admission: float = 1.0,
        move_waiting: bool = True,
        leases: ClientLeases | None = None,
    ):
        self.capacity, self.fail_after, self.interval_s = capacity, fail_after, interval_s
        self.admission_factor = admission
        self.jobs, self.leases = 1, leases  # jobs on the fleet (engine/sharing.py)
        self.rank, self.wall = 0, time.time  # this job among them; turns follow the wall clock
        self.capacities: dict[str, int] = {}  # per replica, from the endpoints file
        self.endpoints_file, self.clock = endpoints_file, clock
        self.replicas: dict[str, Replica] = {}
        self._order = itertools.count()
        self._rank: dict[str, int] = {}
        self._cond: asyncio.Condition | None = None
        self.move_waiting = move_waiting
        self.waiters = 0  # requests waiting for a slot (work the job has yet to send)
        self.moves = 0  # requests moved off a queue to a free replica
        self.unlisted_since: float | None = None  # since when no replica has been listed
        self.sleep = asyncio.sleep  # between health checks (tests drive it)
        self.watch_errors = 0  # health checks that raised (the watch went on)
        self.set_urls(urls)

    # ---- membership --------------------------------------------------------------------------
    def set_urls(self, urls: list[str], capacities: dict[str, int] | None = None) -> None:
        """The replicas listed now (with their capacities where the list says them): new ones
        come in, missing ones stop getting requests (their requests in flight finish)."""
        wanted = [u.rstrip("/") for u in urls]
        if capacities is not None:
            self.capacities = {u.rstrip("/"): c for u, c in capacities.items()}
        for url in wanted:
            r = self.replicas.get(url)
            if r is None:
                r = self.replicas[url] = Replica(url, self.capacity, changed_at=self.clock())
                self._rank[url] = next(self._order)
                log.info("replica %s: listed", public_url(url))
            r.listed = True
            r.share(self.capacities.get(url, self.capacity), self.admission_factor, self.jobs)
        for url, r in self.replicas.items():
            if r.listed and url not in wanted:
                r.listed = False
                log.info("replica %s: no longer listed", public_url(url))
        if wanted:
            self.unlisted_since = None
        elif self.unlisted_since is None:
            self.unlisted_since = self.clock()
            log.warning("no replica listed: requests wait for the endpoints file to list one")
        self._notify()

    def unlisted_for(self) -> float | None:
        """Seconds no replica has been listed (None: some is), for the endpoint's liveness."""
        since = self.unlisted_since
        return None if since is None else self.clock() - since

    def listed(self) -> list[Replica]:
        return [r for r in self.replicas.values() if r.listed]

    def admission(self) -> int:
        """Sequences the listed replicas admit in all (what fills the fleet)."""
        return sum(r.cap for r in self.listed())

    def set_jobs(self, jobs: int) -> None:
        """The jobs sharing the fleet now: every replica's share follows."""
        if jobs != self.jobs:
            log.info("fleet: %d jobs share the replicas", jobs)
        self.jobs = max(1, jobs)
        for r in self.replicas.values():
            r.share(r.capacity, self.admission_factor, self.jobs)

    def has_in(self, besides: Replica | None = None) -> bool:
        return any(r.state == IN and r is not besides for r in self.listed())

    # ---- choosing ----------------------------------------------------------------------------
    def pick(self, weight: int, prefer: str | None = None) -> Replica | None:
        """The replica for a request of `weight` sequences now, or None (wait for a slot).
        `prefer`: a replica that answered the request's earlier turns (its prefix cache holds
        them): while it is in, the request waits for it rather than going elsewhere."""
        preferred = self.replicas.get(prefer) if prefer is not None else None
        if preferred is not None and preferred.listed and preferred.state == IN:
            return preferred if preferred.admits(weight) else None
        live = [r for r in self.listed() if r.state == IN]
        if live:
            fits = [r for r in live if r.admits(weight)]
            if not fits:
                return None
            return min(fits, key=lambda r: (r.load(), self._rank[r.url]))
        # none in (or nothing listed yet: wait for the endpoints file): the least recently
        # failed, so attempts (and liveness) keep going round, within the cap still
        out = [r for r in self.listed() if r.admits(weight)]
        if not out:
            return None
        return min(out, key=lambda r: (r.in_flight, r.changed_at))

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    def _notify(self) -> None:
        cond = self._cond
        if cond is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return

        async def wake() -> None:
            async with cond:
                cond.notify_all()

        asyncio.ensure_future(wake())

    async def acquire(self, weight: int = 1, prefer: str | None = None) -> Replica:
        cond = self._condition()
        async with cond:
            self.waiters += 1
            try:
                while (r := self.pick(weight, prefer)) is None:
                    await cond.wait()
            finally:
                self.waiters -= 1
            r.sent(weight)
            return r

    def track(self, r: Replica, weight: int, pinned: bool = False) -> Ticket:
        """A request acquired on `r`, that a move may send elsewhere (until `untrack`) unless
        `pinned` (a turn of an episode)."""
        ticket = Ticket(r, weight, pinned=pinned)
        r.tickets.append(ticket)
        return ticket

    def untrack(self, ticket: Ticket) -> None:
        with contextlib.suppress(ValueError):
            ticket.replica.tickets.remove(ticket)

    def rebalance(self) -> int:
        """Move waiting requests to free replicas (engine/moves.py); how many moved."""
        if not self.move_waiting or self.waiters or self.jobs > 1:
            return 0  # work waiting for a slot fills whatever frees; another job's queue: stay
        live = [r for r in self.listed() if r.state == IN]
        moves = plan_moves(live)
        for ticket, dst in moves:
            src, w = ticket.replica, ticket.weight
            src.tickets.remove(ticket)
            src.in_flight, src.moved_out = src.in_flight - w, src.moved_out + w
            dst.in_flight, dst.moved_in = dst.in_flight + w, dst.moved_in + w
            dst.tickets.append(ticket)
            ticket.replica, ticket.moves = dst, ticket.moves + 1
            ticket.moved.set()
        self.moves += len(moves)
        if moves:
            log.debug("moved %d waiting requests to free replicas", len(moves))
        return len(moves)

    def release(
        self, r: Replica, weight: int, error: str | None = None, dead: bool = False
    ) -> None:
        """A request on `r` ended: answered (no error), failed (`error`), or its connection
        could not be made or was cut (`dead`: out at once)."""
        r.in_flight -= weight
        if error is None:
            r.done += 1
            r.failures = 0
        else:
            r.errors += 1
            r.failures += 1
            r.last_error = redact(error)
            if dead or r.failures >= self.fail_after:
                self.take_out(r, error)
        self._notify()

    def cancelled(self, r: Replica, weight: int) -> None:
        r.in_flight -= weight
        self._notify()

    def take_out(self, r: Replica, why: str) -> None:
        if r.state == OUT:
            return
        r.state, r.changed_at = OUT, self.clock()
        log.warning("replica %s: out (%s)", public_url(r.url), redact(why))

    def take_back(self, r: Replica) -> None:
        if r.state == IN:
            return
        r.state, r.changed_at, r.failures = IN, self.clock(), 0
        log.info("replica %s: back in (answers /health)", public_url(r.url))
        self._notify()

    # ---- health ------------------------------------------------------------------------------
    async def probe(self, session: aiohttp.ClientSession, r: Replica) -> str | None:
        """GET /health: None on a 200 within max(interval, 5 s), else what went wrong."""
        try:
            async with session.get(
                health_url(r.url), timeout=aiohttp.ClientTimeout(total=max(self.interval_s, 5.0))
            ) as resp:  # the status is the answer: the body is never read
                return None if resp.status == 200 else f"/health answered HTTP {resp.status}"
        except aiohttp.ClientConnectorError as exc:
            return f"{CONNECT_FAILED}: {exc}"
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return f"/health: {type(exc).__name__}"

    async def read_queue(self, session: aiohttp.ClientSession, r: Replica) -> None:
        """The replica's waiting sequences from its /metrics (None where it has none)."""
        try:
            async with session.get(
                metrics_url(r.url), timeout=aiohttp.ClientTimeout(total=max(self.interval_s, 5.0))
            ) as resp:
                body = (await read_bounded(resp, METRICS_BYTES))[0] if resp.status == 200 else b""
        except (TimeoutError, aiohttp.ClientError, OSError, AttemptError):
            body = b""
        page = body.decode("utf-8", "replace")
        problems: list[str] = []
        r.queued = gauge_sum(page, WAITING_GAUGE, problems)
        r.running = gauge_sum(page, RUNNING_GAUGE, problems)
        problem = "; ".join(problems)[:300] or None
        if problem is not None and problem != r.metrics_problem:  # once, not every probe
            log.warning("replica %s: /metrics samples ignored: %s", public_url(r.url), problem)
        r.metrics_problem = problem
        r.queue_read, r.moved_in, r.moved_out, r.sent_over, r.sent_since = True, 0, 0, 0, 0
        r.turn = (self.rank - int(self.wall() // self.interval_s)) % self.jobs

    async def check_once(self, session: aiohttp.ClientSession) -> None:
        if self.endpoints_file is not None:
            urls = self.endpoints_file.poll()
            if urls is not None:
                self.set_urls(urls, self.endpoints_file.capacities)
        if self.leases is not None:
            self.set_jobs(self.leases.renew())
            self.rank = self.leases.rank
        replicas = self.listed()
        problems = await asyncio.gather(*(self.probe(session, r) for r in replicas))
        healthy = [r for r, problem in zip(replicas, problems, strict=True) if problem is None]
        await asyncio.gather(*(self.read_queue(session, r) for r in healthy))
        self._notify()  # a shorter queue may admit a waiting request
        self.rebalance()
        for r, problem in zip(replicas, problems, strict=True):
            if problem is None:
                self.take_back(r)
            elif problem.startswith(CONNECT_FAILED):
                self.take_out(r, problem)  # nobody listens there: gone
            elif r.state == IN:
                # slow or erring /health (a loaded server, or a loaded client): a failure
                # like a 5xx, out after fail_after in a row; an answered request resets it
                r.failures += 1
                r.last_error = problem
                if r.failures >= self.fail_after:
                    self.take_out(r, problem)

    async def start(self, session: aiohttp.ClientSession) -> None:
        """Before the job's first request: the replicas' queues read and, on a fleet, the jobs
        on it counted twice one health interval apart, so jobs started together see each
        other before any takes a share of the slots (engine/sharing.py)."""
        await self.check_once(session)
        if self.leases is not None:
            await asyncio.sleep(self.interval_s)
            await self.check_once(session)

    async def watch(self, session: aiohttp.ClientSession) -> None:
        """Probe at once (the queues: no job starts with a burst past the slots), then every
        interval until cancelled. A check that raises is logged and the watch goes on: a task
        that died here would leave replicas out for good and the endpoints file unread."""
        try:
            while True:
                try:
                    await self.check_once(session)
                except Exception as exc:  # any failure: logged, then the watch goes on
                    self.watch_errors += 1
                    log.warning(
                        "health watch: a check failed (%s: %s); watching on",
                        type(exc).__name__,
                        redact(str(exc))[:300],
                    )
                await self.sleep(self.interval_s)
        finally:
            if self.leases is not None:
                self.leases.release()

    def snapshot(self) -> list[dict]:
        """Per replica: url (password masked), state, in flight, done, errors, last error."""
        return [
            {
                "url": public_url(r.url),
                "state": r.state if r.listed else "unlisted",
                "in_flight": r.in_flight,
                "done": r.done,
                "errors": r.errors,
                "last_error": r.last_error,
            }
            for r in self.replicas.values()
        ]


def make_balancer(cfg: Config, endpoint: Endpoint) -> Balancer | None:
    """The balancer over the endpoint's replicas (None: one URL, sent to directly)."""
    if not endpoint.balanced:
        return None
    urls = list(endpoint.urls)
    file = EndpointsFile(endpoint.endpoints_file) if endpoint.endpoints_file else None
    leases = None
    if file is not None:
        urls = file.poll() or urls  # the newest list; changes from here on come by watch()
        stale = max(STALE_MIN_S, 5 * cfg.engine.health_interval_s)
        leases = ClientLeases(file.path.parent / "clients", stale)
    b = Balancer(
        urls,
        replica_capacity(cfg),
        fail_after=cfg.engine.replica_failures_out,
        interval_s=cfg.engine.health_interval_s,
        endpoints_file=file,
        admission=cfg.engine.replica_admission,
        move_waiting=cfg.engine.move_waiting,
        leases=leases,
    )
    if file is not None:
        b.set_urls(urls, file.capacities)
    if leases is not None:  # before the first request: a job starts within its share
        b.set_jobs(leases.renew())
        b.rank = leases.rank
    return b

"""The OpenAI-compatible chat-completions client: retries, backoff, typed failures.

One `complete()` call asks for `n` samples with seed `s` (vLLM gives choice j the seed s + j, so
a rollout's text depends only on its own seed, whichever request it came from). Transient
errors (connection, timeout, 5xx, 429, a reply that does not validate into the record's types:
`rewardprof.engine.reply`) are retried with exponential backoff and jitter, honouring
Retry-After (up to `retry_after_max_s`), within `max_attempts` and `retry_budget_s`;
deterministic errors (context length, other 4xx) fail at once (the retry core:
`rewardprof.engine.http_retry`). A reply larger than `max_tokens` allows
(`rollout.max_chars_per_token`) is `reply_too_large`, found while reading, never read whole.
A server that returns fewer choices than asked is asked again, at once, for the missing ones
only.
With several replicas (`rewardprof.engine.balancer`) each attempt goes to the least loaded one,
and a request whose replica died (connection refused or cut) is re-sent at once, same body and
seed, to another one. While no request gets any answer (`EndpointLiveness`), a request whose
attempts all ended in connection errors is not recorded as failed: it keeps asking until the
endpoint answers again or the rollout job stops on `rollout.endpoint_down_s`.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from rewardprof.core.config import Rollout
from rewardprof.core.kinds import FailureKind
from rewardprof.engine.balancer import Balancer
from rewardprof.engine.http_retry import (
    AttemptError,
    RetryPolicy,
    bearer_url,
    post_json,
    redact,
    with_retries,
)
from rewardprof.engine.liveness import EndpointLiveness, is_connect_failure
from rewardprof.engine.moves import Ticket
from rewardprof.engine.reply import Choice, ReplyBounds, parse_choices


@dataclass
class ChatResult:
    choices: list[Choice] = field(default_factory=list)
    prompt_tokens: int | None = None
    attempts: int = 0
    latency_s: float = 0.0
    failure: str | None = None  # a FailureKind when some choices are missing for good
    detail: str | None = None


@dataclass
class Affinity:
    """The replica an episode's turns go to (None until its first turn is answered)."""

    url: str | None = None


class ChatClient:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        api_key: str | None,
        settings: Rollout,
        rng: random.Random | None = None,
        liveness: EndpointLiveness | None = None,
        balancer: Balancer | None = None,
    ):
        self.session = session
        self.balancer = balancer  # several replicas: each attempt goes to one of them
        self.liveness = liveness  # told how every attempt ended (a dead endpoint stops a job)
        if balancer is not None and liveness is not None:
            liveness.follow_listing(balancer.unlisted_for)  # an empty fleet stops a job too
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {"Content-Type": "application/json"}
        self.bearer = bool(api_key)
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
            self.url = bearer_url(self.url)
        self._secret = api_key
        self.settings = settings
        self.policy = RetryPolicy.of(settings)
        self.rng = rng or random.Random()
        self.failovers = 0  # requests re-sent to another replica after theirs died

    async def _post(
        self, body: dict[str, Any], max_bytes: int, affinity: Affinity | None = None
    ) -> Any:
        if self.balancer is None:
            return await self._post_to(self.url, body, max_bytes)
        weight = int(body.get("n", 1))
        for _ in range(len(self.balancer.replicas) + 1):
            prefer = affinity.url if affinity is not None else None
            replica = await self.balancer.acquire(weight, prefer)
            ticket = self.balancer.track(replica, weight, pinned=affinity is not None)
            try:
                payload = await self._post_following(ticket, body, max_bytes)
            except AttemptError as exc:
                dead = exc.kind == FailureKind.CONNECTION_ERROR
                replica = ticket.replica
                self.balancer.release(replica, weight, self.redact(exc.detail), dead=dead)
                if dead and self.balancer.has_in(besides=replica):
                    # the replica is gone (killed, node lost): the same request, same seed,
                    # to another one at once; not an attempt of this request's own
                    self.failovers += 1
                    continue
                raise
            except BaseException:
                self.balancer.cancelled(ticket.replica, weight)
                raise
            finally:
                self.balancer.untrack(ticket)
            self.balancer.release(ticket.replica, weight)
            if affinity is not None:  # the next turn goes where this one is cached
                affinity.url = ticket.replica.url
            return payload
        raise AttemptError(  # every replica failed this one request in turn
            FailureKind.CONNECTION_ERROR, "every replica cut the connection", True
        )

    async def _post_following(self, ticket: Ticket, body: dict[str, Any], max_bytes: int) -> Any:
        """Post to the ticket's replica; when the balancer moves the request (engine/moves.py),
        cancel this post (the connection closes: vLLM aborts the request) and post the same
        body to the replica it moved to."""
        while True:
            replica = ticket.replica
            url = bearer_url(replica.chat_url) if self.bearer else replica.chat_url
            post = asyncio.ensure_future(self._post_to(url, body, max_bytes))
            moved = asyncio.ensure_future(ticket.moved.wait())
            try:
                await asyncio.wait({post, moved}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                moved.cancel()
                if not post.done():
                    post.cancel()
                    await asyncio.wait({post})
            if not post.cancelled() and not (ticket.moved.is_set() and post.exception()):
                return post.result()  # answered (or failed, unmoved) before any move
            ticket.moved.clear()  # moved: a failure of the old post is not the new replica's

    async def _post_to(self, url: str, body: dict[str, Any], max_bytes: int) -> Any:
        return await post_json(
            self.session,
            url,
            body,
            self.settings.request_timeout_s,
            self.headers,
            secret=self._secret,
            max_bytes=max_bytes,
        )

    async def complete(self, body: dict[str, Any], affinity: Affinity | None = None) -> ChatResult:
        """Ask for body['n'] samples; return every choice received, plus a failure if some
        never arrived. Choice indices refer to the original request (seed + index). With
        `affinity` (one per episode), a fleet sends every turn to the replica that answered
        the one before, while it is in (failover as for any request)."""
        n = int(body.get("n", 1))
        base_seed = body.get("seed")
        pending = list(range(n))  # original indices still missing
        result = ChatResult()
        # what a reply can hold, from max_tokens: more is reply_too_large, found while reading
        bounds = ReplyBounds.of_request(body, self.settings.max_chars_per_token)

        async def attempt(number: int) -> None:
            result.attempts += 1  # over every round (see the loop below)
            # Missing choices are asked for again from the first missing index, so every
            # choice keeps the seed it would have had in the original request.
            first = pending[0]
            req = dict(body, n=n - first)
            if base_seed is not None:
                req["seed"] = base_seed + first
            t0 = time.monotonic()
            payload = await self._observed(self._post(req, bounds.body_bytes(n - first), affinity))
            choices, prompt_tokens = parse_choices(payload, n - first, bounds)
            result.latency_s += time.monotonic() - t0
            result.prompt_tokens = prompt_tokens
            got = {first + c.index: c for c in choices}
            for idx in list(pending):
                if idx in got:
                    c = got[idx]
                    result.choices.append(
                        Choice(
                            idx,
                            c.text,
                            c.finish_reason,
                            c.completion_tokens,
                            c.tokens_source,
                            c.tool_calls,
                        )
                    )
                    pending.remove(idx)
            if pending:
                raise AttemptError(
                    FailureKind.ENGINE_ERROR,
                    f"server returned {len(choices)} of {n - first} choices",
                    True,
                    backoff=False,
                )

        if not pending:  # nothing asked for
            return result
        while True:
            try:
                await with_retries(attempt, self.policy, self.rng)
            except AttemptError as exc:
                if exc.kind == FailureKind.CONNECTION_ERROR and self._endpoint_failing():
                    # nobody gets an answer: not this rollout's failure but the endpoint's;
                    # ask again until it answers or the job stops (rollout.endpoint_down_s)
                    continue
                result.failure, result.detail = exc.kind, self.redact(exc.detail)
            return result

    def _endpoint_failing(self) -> bool:
        return self.liveness is not None and self.liveness.failing_since is not None

    async def _observed(self, post: Awaitable[Any]) -> Any:
        """`await post` (one attempt), telling the liveness how it ended: any HTTP answer,
        even a malformed one, shows the server is up; a connection never made, that it is
        not."""
        if self.liveness is None:
            return await post
        token = self.liveness.attempt_started()
        answered, refused = False, None
        try:
            payload = await post
            answered = True
            return payload
        except AttemptError as exc:
            answered = exc.kind not in (FailureKind.CONNECTION_ERROR, FailureKind.TIMEOUT)
            if exc.kind == FailureKind.CONNECTION_ERROR and is_connect_failure(exc.detail):
                refused = self.redact(exc.detail)
            raise
        finally:
            self.liveness.attempt_ended(token, answered, refused)

    def redact(self, text: str) -> str:
        """Error text as recorded: the API key never reaches a record, a log or an exception."""
        return redact(text, self._secret)

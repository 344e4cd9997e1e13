"""`nemo_gym`: any NeMo Gym resource server, running elsewhere, profiled through its HTTP protocol.

A team profiles its own Gym environment without porting it: the entry names the server's URL
(`options.base_url`), rewardprof runs the agent loop, and the server does the rest, as NeMo
Gym's `simple_agent` drives it:
- `POST /seed_session` with the row, once per episode: its cookies are the episode's session
  (each episode its own; a session never leaks into another episode);
- `POST /<tool>` with the call's arguments and the session's cookies: the body, as text, is the
  call's output (a 4xx body included: FastAPI's 404 for a tool it lacks, 422 for arguments it
  refuses, are the model's mistakes and part of its episode);
- `POST /verify` with the row and the whole episode as a Responses-API `response`: its
  `reward` is the verdict, its other fields the extras.

Every request has a timeout and a bounded read; what fails outside the model is a failure with
its kind, never a reward: a server that cannot be reached, answers 5xx, or times out is
`tool_error`/`tool_timeout` during the episode and `verifier_error`/`verifier_timeout` at
/verify. Where a retry is safe it is made (the request was refused before it ran: connection
refused, 429, 503; seeding and verifying are retried on any transient failure), with the
retry policy's attempts, Retry-After cap and budget; a tool call that may have run is never
sent twice. URLs and error texts go through the redaction set (a `${NAME}` or user:password in
`base_url` never reaches a record).
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from pydantic import PositiveFloat, PositiveInt

from rewardprof.core.config_types import HttpUrl, RetryOptions
from rewardprof.core.kinds import FailureKind
from rewardprof.core.redaction import redact
from rewardprof.environments.acting import ActingEnvironment, Episode, ToolFailure
from rewardprof.environments.base import Verdict, VerifyContext
from rewardprof.environments.options import EpisodeOptions

_TOO_LARGE_NOTE = "\n[... the tool's reply passed {} bytes: cut by rewardprof]"
_BULKY = ("responses_create_params", "response")  # sent, never copied into the extras


class NemoGymRemoteOptions(EpisodeOptions, RetryOptions):
    """Where the resource server is, and how long and how much rewardprof waits for it."""

    base_url: HttpUrl
    """The resource server's root, e.g. http://127.0.0.1:8001 (`${NAME}` is replaced by that
    environment variable's value; its value is a secret)."""
    request_timeout_s: PositiveFloat = 120.0
    """Wall clock of one request (a tool call, the seeding, the verification)."""
    max_reply_bytes: PositiveInt = 4 << 20
    """Most bytes of one reply read; a tool's longer reply is cut (and says so), a longer
    seeding or verification reply is a failure."""
    max_extras_chars: PositiveInt = 65536
    """Most characters of /verify's other fields kept as the record's extras (past it only
    their names are kept)."""


class _Reply:
    def __init__(self, status: int, text: str, cookies: dict[str, str], cut: bool):
        self.status, self.text, self.cookies, self.cut = status, text, cookies, cut


class NemoGymRemoteEnvironment(ActingEnvironment[NemoGymRemoteOptions]):
    name = "nemo_gym"
    required_fields = ("responses_create_params",)

    def __init__(self, options: dict[str, Any] | NemoGymRemoteOptions | None = None):
        super().__init__(options)
        self.root = str(self.options.base_url).rstrip("/")
        self._rng = random.Random()
        self._session: Any = None  # an aiohttp.ClientSession, made on first use

    def _http(self) -> Any:
        import aiohttp  # lazy: config validation imports this module for its options

        from rewardprof.engine.http_retry import client_session  # lazy: aiohttp

        if self._session is None:
            # no cookie jar of the session's own: each episode carries its cookies itself
            self._session = client_session(
                aiohttp.TCPConnector(limit=256), cookie_jar=aiohttp.DummyCookieJar()
            )
        return self._session

    async def _post(self, path: str, body: Any, cookies: dict[str, str], safe: bool) -> _Reply:
        """One POST with retries where they are safe; AttemptError when it gets no answer."""
        from rewardprof.engine.http_retry import RetryPolicy, with_retries  # lazy: aiohttp

        async def attempt(n: int) -> _Reply:
            return await self._attempt(path, body, cookies, safe)

        return await with_retries(attempt, RetryPolicy.of(self.options), self._rng)

    async def _attempt(self, path: str, body: Any, cookies: dict[str, str], safe: bool) -> _Reply:
        import aiohttp  # lazy: config validation imports this module for its options

        from rewardprof.engine import http_retry as h  # lazy: aiohttp

        AttemptError = h.AttemptError  # noqa: N806  # the class, under its own name
        read_bounded, retry_after_s = h.read_bounded, h.retry_after_s
        timeout = self.options.request_timeout_s
        try:
            async with self._http().post(
                f"{self.root}/{path}",
                json=body,
                cookies=cookies,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                raw, cut = await read_bounded(resp, self.options.max_reply_bytes)
                text = raw.decode("utf-8", errors="replace")
                if resp.status in (429, 503) or (safe and resp.status >= 500):
                    kind = (
                        FailureKind.RATE_LIMITED if resp.status == 429 else FailureKind.TOOL_ERROR
                    )
                    after = retry_after_s(resp.headers.get("Retry-After"))
                    raise AttemptError(kind, _detail(resp.status, text), True, after)
                new = {k: m.value for k, m in resp.cookies.items()}
                return _Reply(resp.status, text, {**cookies, **new}, cut)
        except TimeoutError:  # before OSError: a TimeoutError is an OSError too
            raise AttemptError(
                FailureKind.TIMEOUT, f"no answer within {timeout:g}s", safe
            ) from None
        except aiohttp.ClientConnectorError as exc:  # never reached the server: always safe
            raise AttemptError(FailureKind.CONNECTION_ERROR, redact(str(exc))[:200], True) from None
        except (aiohttp.ClientError, ConnectionError, OSError) as exc:
            detail = redact(f"{type(exc).__name__}: {exc}")[:200]
            raise AttemptError(FailureKind.CONNECTION_ERROR, detail, safe) from None

    async def start_episode(self, row: dict[str, Any], ctx: VerifyContext) -> dict[str, Any]:
        from rewardprof.engine.http_retry import AttemptError  # lazy: aiohttp

        try:
            reply = await self._post("seed_session", row, {}, safe=True)
        except AttemptError as exc:
            raise ToolFailure(f"/seed_session: {exc.kind}: {exc.detail}") from None
        if reply.status != 200 or reply.cut:
            raise ToolFailure(f"/seed_session: {_detail(reply.status, reply.text)}")
        return {"cookies": reply.cookies}

    async def run_tool(
        self, name: str, arguments: dict[str, Any], state: dict[str, Any], ctx: VerifyContext
    ) -> tuple[str, dict[str, Any]]:
        from rewardprof.engine.http_retry import AttemptError  # lazy: aiohttp

        try:
            reply = await self._post(name, arguments, state["cookies"], safe=False)
        except AttemptError as exc:
            if exc.kind == FailureKind.TIMEOUT:
                raise TimeoutError(exc.detail) from None
            raise ToolFailure(f"{exc.kind}: {exc.detail}") from None
        if reply.status >= 500:  # the server broke, not the model's call
            raise ToolFailure(_detail(reply.status, reply.text))
        text = reply.text
        if reply.cut:
            text += _TOO_LARGE_NOTE.format(self.options.max_reply_bytes)
        return text, {**state, "cookies": reply.cookies}

    async def verify_episode(
        self, row: dict[str, Any], episode: Episode, ctx: VerifyContext
    ) -> Verdict:
        from rewardprof.engine.http_retry import AttemptError  # lazy: aiohttp

        body = {**row, "response": response_object(row, episode)}
        cookies = episode.state.get("cookies", {})
        try:
            reply = await self._post("verify", body, cookies, safe=True)
        except AttemptError as exc:
            kind = (
                FailureKind.VERIFIER_TIMEOUT
                if exc.kind == FailureKind.TIMEOUT
                else FailureKind.VERIFIER_ERROR
            )
            return Verdict.failure(kind, f"/verify: {exc.kind}: {exc.detail}")
        if reply.status != 200 or reply.cut:
            return Verdict.failure(
                FailureKind.VERIFIER_ERROR, f"/verify: {_detail(reply.status, reply.text)}"
            )
        return self._verdict(reply.text)

    def _verdict(self, text: str) -> Verdict:
        try:
            result = json.loads(text)
        except ValueError:
            result = None
        reward = result.get("reward") if isinstance(result, dict) else None
        if isinstance(reward, bool) or not isinstance(reward, (int, float)):
            return Verdict.failure(FailureKind.VERIFIER_ERROR, "/verify: no numeric reward")
        if not math.isfinite(reward):
            return Verdict.failure(FailureKind.VERIFIER_ERROR, f"/verify: reward {reward}")
        extras = {k: v for k, v in result.items() if k not in _BULKY and k != "reward"}
        if len(json.dumps(extras)) > self.options.max_extras_chars:
            extras = {"fields": sorted(extras)}
        return Verdict(float(reward), extras=extras)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _detail(status: int, text: str) -> str:
    return f"HTTP {status}: {' '.join(redact(text[:400]).split())[:200]}"


def response_object(row: dict[str, Any], episode: Episode) -> dict[str, Any]:
    """The episode as the Responses-API response NeMo Gym's agent hands to /verify: per turn
    its message, its function calls and their outputs, in order."""
    output: list[dict[str, Any]] = []
    for k, turn in enumerate(episode.turns):
        if turn.content:
            output.append(
                {
                    "id": f"msg_{k}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": turn.content, "annotations": []}],
                }
            )
        for call in turn.calls:
            output.append(
                {
                    "id": call.id,
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments,
                    "status": "completed",
                }
            )
        for result in turn.results:
            output.append(
                {"type": "function_call_output", "call_id": result.call.id, "output": result.output}
            )
    rcp = row.get("responses_create_params") or {}
    return {
        "id": "resp_rewardprof",
        "object": "response",
        "created_at": 0.0,
        "model": rcp.get("model") or "policy",
        "output": output,
        "parallel_tool_calls": rcp.get("parallel_tool_calls", True),
        "tool_choice": rcp.get("tool_choice") or "auto",
        "tools": rcp.get("tools") or [],
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": None,
        "temperature": rcp.get("temperature"),
        "top_p": rcp.get("top_p"),
    }

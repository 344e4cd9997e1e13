"""A scripted, fault-injecting OpenAI-compatible server on loopback (real HTTP).

For tests and benchmarks: never the only proof that something works against a real engine, but
the way to script exact answers per prompt and to inject the faults a sweep meets.

    with FakeOpenAI(answer=lambda prompt, seed: "\\boxed{5}" if "2 + 3" in prompt else "no") as s:
        s.base_url  # http://127.0.0.1:PORT/v1
        s.faults.extend(["500", "429:retry_after=1", "hang", "reset", "garbage", "fewer"])
        s.stats["ok_requests"], s.stats["ok_choices"]

Faults are consumed one per chat request, in order; an empty queue serves normally. `fault_fn`
may instead decide per request (return a fault string or None). Fault strings:

    500 | 502 | 503[:retry_after=S]  that HTTP status with a JSON error body (and Retry-After)
    429[:retry_after=S]        rate limited, optionally with `Retry-After: S` (seconds)
    429:retry_after_date=S     ... with Retry-After as an HTTP date S seconds from now
    hang[:S]                   no answer for S seconds (default hang_s; cut short by stop())
    hold                       no answer until release() (or stop()), then served normally
    reset                      200 + headers promising a body, then the connection is closed
    garbage                    200 with a truncated JSON body
    fewer                      one choice fewer than asked
    length                     every choice ends with finish_reason "length"
    context_length             HTTP 400 "maximum context length" (deterministic: never retry)
    content_list, gzip_bomb, ...  a malformed or oversized reply (testing/hostile_replies.py)
    auth_echo                  HTTP 500 quoting the Authorization header, as sent and decoded

A gate holds answers until a test says so (kill tests: an attempt that needs the held answers
cannot finish before it is killed, however fast the machine):

    s.hold_after(3)    # serve the next 3 answers, then hold every later request
    s.gate_held        # requests waiting at the gate now (s.gate_served: answers let through)
    s.hold_after(None) # open the gate (also re-arming it, or stop(), lets held requests go)
    s.hold_after(3, match=lambda body: ...)  # a gate for the requests whose body `match`
                       # picks (one shard's, say): only they count toward the 3 and are held;
                       # every other request is served as if there were no gate

Only requests about to be answered pass the gate: a request answered with a fault (500, ...)
does not count, so retries cannot use up the served answers.

`api_key` makes the server demand `Authorization: Bearer <key>` (401 otherwise; with
`echo_key=True` the 401 body quotes the key it got, like some providers do); `basic_auth=
(user, password)` demands HTTP Basic auth instead (a base URL with user:password); with
`echo_auth=True` every completion quotes the Authorization header it got, as sent and decoded.
`request_times` holds the monotonic arrival time of every chat request (backoff, Retry-After).
`latency_s` delays every chat answer, `models_latency_s` every `GET /models` (the check a
rollout job makes before its first request): a job's rate and startup, set by the test.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import email.utils
import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from rewardprof.testing.hostile_replies import MANGLE, RAW, STREAMED, quoted_auth
from rewardprof.testing.openai_http import BackgroundServer, chat_completion, request_prompt

AnswerFn = Callable[[str, int | None], str]


def _default_answer(prompt: str, seed: int | None) -> str:
    return "I am not sure."


class FakeOpenAI(BackgroundServer):
    def __init__(
        self,
        answer: AnswerFn = _default_answer,
        model: str = "fake-model",
        host: str = "127.0.0.1",
        port: int = 0,
        latency_s: float = 0.0,
        models_latency_s: float = 0.0,
        hang_s: float = 3600.0,
        fault_fn: Callable[[dict], str | None] | None = None,
        return_token_ids: bool = True,
        api_key: str | None = None,
        echo_key: bool = False,
        basic_auth: tuple[str, str] | None = None,
        echo_auth: bool = False,
        tool_calls: Callable[[dict], list[dict] | dict | None] | None = None,
    ):
        super().__init__(host, port)
        # a request that offers tools: the calls the model makes (chat-completions tool_calls),
        # or None to answer with text, or {"content", "tool_calls"}: both given (a replay)
        self.tool_calls = tool_calls
        self.echo_auth = echo_auth
        self.answer, self.model = answer, model
        self.latency_s, self.hang_s, self.fault_fn = latency_s, hang_s, fault_fn
        self.models_latency_s = models_latency_s  # a job's startup, as an engine check takes
        self.return_token_ids = return_token_ids
        self.api_key, self.echo_key = api_key, echo_key
        self.expected_auth = f"Bearer {api_key}" if api_key is not None else None
        if basic_auth is not None:
            pair = base64.b64encode(":".join(basic_auth).encode()).decode()
            self.expected_auth = f"Basic {pair}"
        self.faults: deque[str] = deque()
        self.stats: Counter[str] = Counter()
        self.requests: list[dict[str, Any]] = []  # every chat request body, in order
        self.request_times: list[float] = []  # time.monotonic() at each chat request
        self._released: asyncio.Event | None = None
        self._gate: _Gate | None = None
        self._lock = threading.Lock()

    # --- lifecycle (BackgroundServer: start, stop, base_url, with) ---------------------------
    def on_loop(self) -> None:
        self._released = asyncio.Event()

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/health", self._health)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        # the same API under one path segment (a gateway's https://host/<token>/v1): the
        # segments seen are counted in stats as `prefix:<segment>`
        app.router.add_get("/{prefix}/health", self._health)
        app.router.add_get("/{prefix}/v1/models", self._prefixed(self._models))
        app.router.add_post("/{prefix}/v1/chat/completions", self._prefixed(self._chat))

    def _prefixed(self, handler):
        async def counted(request: web.Request) -> web.StreamResponse:
            self.stats[f"prefix:{request.match_info['prefix']}"] += 1
            return await handler(request)

        return counted

    def release(self) -> None:
        """Let every request held by a `hold` fault (now or later) be served."""
        self.call_in_loop(self._released.set)

    def hold_after(self, m: int | None, match: Callable[[dict], bool] | None = None) -> None:
        """Arm a new gate: the next `m` requests that get an answer are served, every later
        one waits until the gate is replaced (`hold_after(None)`: no gate) or the server
        stops. With `match`, the gate counts and holds only the requests whose body it
        returns true for; the others pass. Requests held by the previous gate are let go
        (served; a killed client's connection is gone, which the server shrugs off)."""
        with self._lock:
            old, self._gate = self._gate, (None if m is None else _Gate(m, match))
        if old is not None:
            self.call_in_loop(old.opened.set)

    @property
    def gate_served(self) -> int:
        """Answers the current gate let through (with `match`: matched ones only)."""
        return self._gate.served if self._gate else 0

    @property
    def gate_held(self) -> int:
        """Requests waiting at the current gate."""
        return self._gate.held if self._gate else 0

    async def _pass_gate(self, body: dict) -> None:
        while True:
            gate = self._gate
            if gate is None:
                return
            # the test's `match` runs outside the lock (it may be slow, or raise: a 500 then)
            picked = gate.match is None or gate.match(body)
            with self._lock:
                if self._gate is not gate:
                    continue  # re-armed meanwhile: the new gate decides
                if not picked:
                    return
                if gate.served < gate.limit:
                    gate.served += 1
                    return
                gate.held += 1
                break
        done = [asyncio.ensure_future(e.wait()) for e in (gate.opened, self.closing)]
        try:
            await asyncio.wait(done, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in done:
                task.cancel()
            with self._lock:
                gate.held -= 1

    # --- handlers --------------------------------------------------------------------------
    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    def _unauthorized(self, request: web.Request) -> web.Response | None:
        if self.expected_auth is None:
            return None
        got = request.headers.get("Authorization", "")
        if got == self.expected_auth:
            with self._lock:
                self.stats["auth_ok"] += 1
            return None
        with self._lock:
            self.stats["auth_failed"] += 1
        quoted = f": {got.removeprefix('Bearer ')!r}" if self.echo_key else ""
        return web.json_response(
            {"error": {"message": f"Incorrect API key provided{quoted}"}}, status=401
        )

    async def _models(self, request: web.Request) -> web.Response:
        if (denied := self._unauthorized(request)) is not None:
            return denied
        if self.models_latency_s:
            await asyncio.sleep(self.models_latency_s)
        return web.json_response({"object": "list", "data": [{"id": self.model}]})

    def _next_fault(self, body: dict) -> str | None:
        with self._lock:
            if self.faults:
                return self.faults.popleft()
        return self.fault_fn(body) if self.fault_fn else None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        with self._lock:
            self.requests.append(body)
            self.request_times.append(time.monotonic())
            self.stats["requests"] += 1
        if (denied := self._unauthorized(request)) is not None:
            return denied
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        fault = self._next_fault(body)
        if fault is not None:
            self.stats[f"fault:{fault.split(':')[0]}"] += 1
            resp = await self._fault(fault, request, body)
            if resp is not None:
                return resp
        if body.get("model") != self.model:
            return web.json_response(
                {"error": {"message": f"model {body.get('model')!r} does not exist"}}, status=404
            )
        await self._pass_gate(body)
        payload = self._completion(body, fault)
        if self.echo_auth:
            for choice in payload["choices"]:
                choice["message"]["content"] += f" ({quoted_auth(request)})"
        return web.json_response(payload)

    def _completion(self, body: dict, fault: str | None) -> dict:
        n = int(body.get("n", 1))
        seed = body.get("seed")
        prompt = request_prompt(body)
        if fault == "fewer":
            n = max(0, n - 1)
        choices = []
        for j in range(n):
            text = self.answer(prompt, None if seed is None else seed + j)
            finish = "stop"
            max_tokens = body.get("max_tokens")
            tokens = text.split()
            if fault == "length" or (max_tokens and len(tokens) > max_tokens):
                tokens = tokens[: max_tokens or len(tokens)]
                text, finish = " ".join(tokens), "length"
            choices.append((text, finish, len(tokens)))
        with self._lock:
            self.stats["ok_requests"] += 1
            self.stats["ok_choices"] += len(choices)
        # as vLLM: token ids only if asked
        ids = self.return_token_ids and bool(body.get("return_token_ids"))
        payload = chat_completion(self.model, choices, len(prompt.split()), ids)
        if self.tool_calls is not None and body.get("tools"):
            for j, choice in enumerate(payload["choices"]):
                calls = self.tool_calls({**body, "seed": None if seed is None else seed + j})
                if isinstance(calls, dict):
                    choice["message"]["content"] = calls.get("content")
                    calls = calls.get("tool_calls")
                if calls:
                    choice["message"]["tool_calls"] = calls
                    choice["finish_reason"] = "tool_calls"
        if fault in MANGLE:
            MANGLE[fault](payload)
        return payload

    async def _fault(self, fault: str, request: web.Request, body: dict):
        kind, _, arg = fault.partition(":")
        headers = {}
        if arg.startswith("retry_after="):
            headers["Retry-After"] = arg.split("=", 1)[1]
        elif arg.startswith("retry_after_date="):
            when = time.time() + float(arg.split("=", 1)[1])
            headers["Retry-After"] = email.utils.formatdate(when, usegmt=True)
        if kind in ("500", "502", "503"):
            return web.json_response(
                {"error": {"message": "injected"}}, status=int(kind), headers=headers
            )
        if kind == "429":
            return web.json_response(
                {"error": {"message": "rate limited"}}, status=429, headers=headers
            )
        if kind == "context_length":
            return web.json_response(
                {"error": {"message": "This model's maximum context length is 2048 tokens"}},
                status=400,
            )
        if kind == "hang":
            # the hang ends after its time (or at stop()); nobody is waiting for the answer
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.closing.wait(), float(arg) if arg else self.hang_s)
            return web.json_response({"error": {"message": "hung"}}, status=500)
        if kind == "garbage":
            return web.Response(text='{"choices": [ {"mess', content_type="application/json")
        if kind == "reset":
            # headers promise a body, then the connection is cut mid-body
            resp = web.StreamResponse(status=200, headers={"Content-Length": "1000"})
            await resp.prepare(request)
            await resp.write(b'{"choices": [')
            request.transport.close()
            return resp
        if kind == "hold":
            done = [asyncio.ensure_future(e.wait()) for e in (self._released, self.closing)]
            _, pending = await asyncio.wait(done, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
            return None  # then served normally
        if kind == "auth_echo":
            message = f"upstream failed for request with {quoted_auth(request)}"
            return web.json_response({"error": {"message": message}}, status=500)
        if kind in STREAMED:
            return await STREAMED[kind](request)
        if kind in RAW:
            status, content_type, raw = RAW[kind]
            return web.Response(status=status, body=raw, content_type=content_type)
        if kind in ("fewer", "length") or kind in MANGLE:
            return None  # served normally, shaped in _completion
        raise ValueError(f"unknown fault {fault!r}")


class _Gate:
    def __init__(self, limit: int, match: Callable[[dict], bool] | None = None):
        self.limit, self.match, self.served, self.held = limit, match, 0, 0
        self.opened = asyncio.Event()  # bound to the server's loop when first awaited


def scripted(answers: dict[str, str], default: str = "I am not sure.") -> AnswerFn:
    """Answer by prompt substring: the first key found in the prompt picks the answer."""

    def answer(prompt: str, seed: int | None) -> str:
        for key, text in answers.items():
            if key in prompt:
                return text
        return default

    return answer


def main() -> None:  # `python -m rewardprof.testing.fake_server --port 8000 --answers a.json`
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="fake-model")
    p.add_argument("--answers", help="JSON file: {prompt substring: answer text}")
    args = p.parse_args()
    answers = json.loads(Path(args.answers).read_text()) if args.answers else {}
    server = FakeOpenAI(scripted(answers), model=args.model, port=args.port).start()
    print(f"serving {server.base_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()

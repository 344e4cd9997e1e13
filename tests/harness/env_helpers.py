"""Helpers for the environment (verifier) tests: fixture cases and a fake judge endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web

DATA = Path(__file__).resolve().parents[1] / "data" / "environments"


def load_cases(env_name: str) -> list[dict]:
    with (DATA / f"{env_name}.jsonl").open() as f:
        return [json.loads(line) for line in f if line.strip()]


class FakeJudge:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 with scripted replies.

    `script` entries are consumed one per request: a str (reply text, HTTP 200), a tuple
    (status, headers, body text), or a dict with optional keys reply, status, headers, body,
    delay (seconds before answering). When the script is empty, `default` (a str) is served.
    """

    def __init__(self, default: str = "VERDICT: CORRECT"):
        self.script: deque = deque()
        self.default = default
        self.requests: list[dict] = []
        self.times: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.base_url = ""

    async def _chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        self.times.append(time.monotonic())
        item = self.script.popleft() if self.script else self.default
        if isinstance(item, str):
            item = {"reply": item}
        elif isinstance(item, tuple):
            item = dict(zip(("status", "headers", "body"), item, strict=True))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(item.get("delay", 0))
        finally:
            self.in_flight -= 1
        if "reply" not in item:
            return web.Response(
                status=item.get("status", 200),
                headers=item.get("headers"),
                text=item.get("body", ""),
            )
        reply = {
            "id": "x",
            "object": "chat.completion",
            "model": body.get("model"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": item["reply"]},
                }
            ],
        }
        return web.json_response(reply)

    @asynccontextmanager
    async def serving(self):
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        try:
            yield self
        finally:
            await runner.cleanup()


def run(coro):
    return asyncio.run(coro)

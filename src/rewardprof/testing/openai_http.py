"""What the test servers (fake_server, sim_engine) share: an aiohttp app served from a thread
with its own event loop, and the OpenAI chat-completions shapes (request prompt, reply)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

from aiohttp import web


def request_prompt(body: dict) -> str:
    """The text a request's messages hold, joined by newlines (what answers are keyed on)."""
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


def chat_completion(
    model: str,
    choices: list[tuple[str, str, int]],
    prompt_tokens: int,
    token_ids: bool = False,
) -> dict[str, Any]:
    """A chat.completion body from (text, finish_reason, completion tokens) per choice;
    `token_ids` adds each choice's ids (as vLLM does when asked with return_token_ids)."""
    out, total = [], 0
    for j, (text, finish, tokens) in enumerate(choices):
        total += tokens
        choice = {"index": j, "message": {"role": "assistant", "content": text}}
        choice["finish_reason"] = finish
        if token_ids:
            choice["token_ids"] = list(range(tokens))
        out.append(choice)
    return {
        "id": f"cmpl-{time.monotonic_ns()}",
        "object": "chat.completion",
        "model": model,
        "choices": out,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": total,
            "total_tokens": total + prompt_tokens,
        },
    }


def call_first_tool(reply: dict[str, Any], name: str, tag: str) -> None:
    """Turn each finished choice of `reply` into a call of tool `name` (no arguments), as a
    model that acts answers a turn: `tool_calls`, finish_reason `tool_calls`."""
    for choice in reply["choices"]:
        if choice["finish_reason"] == "stop":
            call = {"name": name, "arguments": "{}"}
            call_id = f"call_{tag}_{choice['index']}"
            choice["message"]["tool_calls"] = [
                {"id": call_id, "type": "function", "function": call}
            ]
            choice["finish_reason"] = "tool_calls"


class BackgroundServer:
    """Serves `routes(app)` on host:port (port 0: a free one) from a daemon thread.

    Subclasses add routes and may create loop-bound state in `on_loop()`; `closing` is set when
    `stop()` begins, so handlers that wait can end instead of holding the shutdown."""

    handler_cancellation = False  # True: a handler is cancelled when its client disconnects

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self.host, self.port = host, port
        self.closing: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def routes(self, app: web.Application) -> None:
        raise NotImplementedError

    def on_loop(self) -> None:
        """Runs in the server's loop before it serves (create asyncio objects here)."""

    def start(self):
        if not self.port:
            with socket.socket() as s:
                s.bind((self.host, 0))
                self.port = s.getsockname()[1]
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError(f"{type(self).__name__} did not start")
        return self

    def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self.closing = asyncio.Event()
        self.on_loop()
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(
            app,
            access_log=None,
            shutdown_timeout=1.0,
            handler_cancellation=self.handler_cancellation,
        )
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        self._loop.run_until_complete(site.start())
        ready.set()
        self._loop.run_forever()

    def call_in_loop(self, fn, *args) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(fn, *args)

    def stop(self) -> None:
        if self._loop is None:
            return
        self._loop.call_soon_threadsafe(self.closing.set)
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        fut.result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread:
            self._thread.join(10)
        self._loop = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

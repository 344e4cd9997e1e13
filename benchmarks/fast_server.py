"""A minimal zero-latency OpenAI-compatible server for the client-overhead benchmark.

    python benchmarks/fast_server.py --port 8123 [--latency 0.05]

Raw asyncio HTTP/1.1 with keep-alive and pre-rendered chat-completion bodies (completions of
0.5-8 kB ending in a `\\boxed{}` answer), so the server costs a few microseconds per request and
the client is what gets measured. It answers GET /health, GET /v1/models and
POST /v1/chat/completions (reading only `n` from the request body). Not a test double for
behaviour: use rewardprof.testing.fake_server for that.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synth import Text  # noqa: E402

_CL = re.compile(rb"content-length:\s*(\d+)", re.I)
_N = re.compile(rb'"n":\s*(\d+)')
MODEL = "fake-model"


def _response(body: bytes) -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


def render(variants: int = 4, seed: int = 0) -> dict[int, itertools.cycle]:
    text, rng = Text(seed, pool_bytes=1 << 20), random.Random(seed)
    out = {}
    for n in range(1, 17):
        bodies = []
        for v in range(variants):
            choices, total = [], 0
            for j in range(n):
                length = int(500 * 16 ** rng.random())  # 0.5-8 kB, log-uniform
                answer = rng.choice([str(rng.randrange(10000)), "\\frac{3}{7}", "x^2 + 1"])
                content = text.take(rng, length) + f"\n\nThe answer is \\boxed{{{answer}}}."
                total += length // 4
                choices.append(
                    {
                        "index": j,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                )
            payload = {
                "id": f"cmpl-{n}-{v}",
                "object": "chat.completion",
                "model": MODEL,
                "choices": choices,
                "usage": {
                    "prompt_tokens": 400,
                    "completion_tokens": total,
                    "total_tokens": total + 400,
                },
            }
            bodies.append(_response(json.dumps(payload).encode()))
        out[n] = itertools.cycle(bodies)
    return out


class Http(asyncio.Protocol):
    bodies: dict[int, itertools.cycle] = {}
    models = _response(json.dumps({"object": "list", "data": [{"id": MODEL}]}).encode())
    health = _response(b"{}")
    latency_s = 0.0

    def _send(self, reply: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(reply)

    def connection_made(self, transport):
        self.transport, self.buf = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end]
            m = _CL.search(head)
            size = int(m.group(1)) if m else 0
            if len(self.buf) < end + 4 + size:
                return
            body, self.buf = self.buf[end + 4 : end + 4 + size], self.buf[end + 4 + size :]
            if head.startswith(b"POST"):
                m = _N.search(body)
                n = min(16, max(1, int(m.group(1)))) if m else 1
                reply = next(self.bodies[n])
                if self.latency_s:  # a generation's time (bench_balancer.py), not the CPU's
                    asyncio.get_running_loop().call_later(self.latency_s, self._send, reply)
                else:
                    self.transport.write(reply)
            elif b"/v1/models" in head[:64]:
                self.transport.write(self.models)
            else:
                self.transport.write(self.health)


async def serve(port: int, latency_s: float = 0.0) -> None:
    Http.bodies, Http.latency_s = render(), latency_s
    server = await asyncio.get_running_loop().create_server(Http, "127.0.0.1", port, backlog=1024)
    print(f"serving http://127.0.0.1:{port}/v1", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=8123)
    p.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    args = p.parse_args()
    asyncio.run(serve(args.port, args.latency))


if __name__ == "__main__":
    main()

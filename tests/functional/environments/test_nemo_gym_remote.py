"""nemo_gym (L1): a remote resource server spoken to over NeMo Gym's HTTP protocol. The server
here is a stand-in written with aiohttp.web, in the test's own event loop, faithful to NeMo
Gym's example_session_state_mgmt (a counter per session cookie), with faults injected per test;
NeMo Gym's own servers are exercised in test_nemo_gym_server.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web
from harness.episode_replay import scripted

from rewardprof.environments import make_environment
from rewardprof.environments.acting import ToolCall
from rewardprof.environments.base import VerifyContext
from rewardprof.environments.episode import ChatReply, EpisodeFailure, run_episode

TOOLS = [
    {
        "type": "function",
        "name": name,
        "parameters": {"type": "object", "properties": props},
    }
    for name, props in (
        ("increment_counter", {"count": {"type": "integer"}}),
        ("get_counter_value", {}),
    )
]


def _row(initial: int, expected: int) -> dict:
    return {
        "responses_create_params": {
            "input": [{"role": "user", "content": f"Add to the counter until {expected}."}],
            "tools": TOOLS,
        },
        "initial_count": initial,
        "expected_count": expected,
    }


class Counter:
    """NeMo Gym's session counter over HTTP, with a log of what it was sent and faults."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.requests: list[tuple[str, dict, dict]] = []
        self.faults: dict[str, list] = {}  # path -> responses to give first, in order
        self.hold = asyncio.Event()  # never set: a handler awaiting it never answers

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        body = await request.json()
        self.requests.append((path, body, dict(request.cookies)))
        if self.faults.get(path):
            fault = self.faults[path].pop(0)
            if fault == "hang":
                await self.hold.wait()
            return fault
        session = request.cookies.get("session")
        if path == "seed_session":
            session = f"s{len(self.counts)}"
            self.counts[session] = body["initial_count"]
            resp = web.json_response({})
            resp.set_cookie("session", session)
            return resp
        if session not in self.counts:
            return web.json_response({"detail": "no session"}, status=400)
        if path == "increment_counter":
            if not isinstance(body.get("count"), int):
                return web.json_response({"detail": "count must be an integer"}, status=422)
            self.counts[session] += body["count"]
            return web.json_response({"success": True})
        if path == "get_counter_value":
            return web.json_response({"count": self.counts[session]})
        if path == "verify":
            final = self.counts[session]
            reward = float(final == body["expected_count"])
            return web.json_response({**body, "reward": reward, "final_count": final})
        return web.json_response({"detail": "Not Found"}, status=404)


async def _serve(counter: Counter) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/{path}", counter.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}"


def _calls(*calls: tuple[str, dict | str]) -> ChatReply:
    return ChatReply(
        content=None,
        tool_calls=[
            ToolCall(f"c{i}", name, args if isinstance(args, str) else json.dumps(args))
            for i, (name, args) in enumerate(calls)
        ],
    )


async def _episode(env, row, turns):
    ctx = VerifyContext(timeout_s=5)
    episode = await run_episode(scripted(turns, []), env, row, env.prompt(row), 1, ctx)
    return episode, await env.verify_episode(row, episode, ctx)


def _env(url: str, **options):
    opts = {"base_url": url, "backoff_initial_s": 0.01, "backoff_max_s": 0.05, **options}
    return make_environment("nemo_gym", opts)


def _run(test):
    async def main():
        counter = Counter()
        runner, url = await _serve(counter)
        try:
            await test(counter, url)
        finally:
            counter.hold.set()
            await runner.cleanup()

    asyncio.run(main())


def test_each_episode_has_its_own_session_and_the_server_verifies_the_whole_episode():
    async def test(counter, url):
        env = _env(url)
        done = ChatReply(content="The counter is done.")
        a_turns = [
            _calls(("increment_counter", {"count": 2})),
            _calls(("get_counter_value", {})),
            done,
        ]
        b_turns = [_calls(("increment_counter", {"count": 5})), done]
        (a, va), (b, vb) = await asyncio.gather(
            _episode(env, _row(1, 3), a_turns), _episode(env, _row(10, 14), b_turns)
        )
        await env.aclose()
        assert [r.output for t in a.turns for r in t.results] == [
            '{"success": true}',
            '{"count": 3}',
        ]
        assert (va.status, va.reward, va.extras["final_count"]) == ("ok", 1.0, 3)
        assert (vb.status, vb.reward, vb.extras["final_count"]) == ("ok", 0.0, 15)
        # every request after the seeding carried that episode's own cookie
        sessions = {
            json.dumps(b["initial_count"]) for p, b, _ in counter.requests if p == "seed_session"
        }
        assert sessions == {"1", "10"}
        assert all(c.get("session") for p, _, c in counter.requests if p != "seed_session")
        verify = [b for p, b, _ in counter.requests if p == "verify"]
        output = next(v for v in verify if v["expected_count"] == 3)["response"]["output"]
        assert [i["type"] for i in output] == [
            "function_call",
            "function_call_output",
            "function_call",
            "function_call_output",
            "message",
        ]
        assert output[1] == {
            "type": "function_call_output",
            "call_id": "c0",
            "output": '{"success": true}',
        }
        assert "responses_create_params" not in va.extras and "response" not in va.extras

    _run(test)


def test_the_models_mistakes_are_its_episode_the_servers_are_failures():
    async def test(counter, url):
        env = _env(url)
        turns = [
            _calls(("increment_counter", {"count": "two"})),  # 422: the model's mistake
            ChatReply(content="done"),
        ]
        episode, verdict = await _episode(env, _row(0, 2), turns)
        assert episode.turns[0].results[0].output == '{"detail": "count must be an integer"}'
        assert (verdict.status, verdict.reward) == ("ok", 0.0)
        # a 500 from a tool is never sent again and never scored
        counter.faults["increment_counter"] = [web.Response(status=500, text="boom")]
        with pytest.raises(EpisodeFailure) as failed:
            await _episode(env, _row(0, 2), [_calls(("increment_counter", {"count": 2}))])
        assert failed.value.kind == "tool_error" and "HTTP 500: boom" in str(failed.value)
        assert sum(p == "increment_counter" for p, _, _ in counter.requests) == 2
        await env.aclose()

    _run(test)


def test_refused_requests_are_retried_and_a_hang_is_a_timeout():
    async def test(counter, url):
        env = _env(url, request_timeout_s=0.5)
        counter.faults["increment_counter"] = [
            web.Response(status=503, text="busy", headers={"Retry-After": "0"}) for _ in range(2)
        ]
        counter.faults["verify"] = [web.Response(status=502, text="proxy")]
        episode, verdict = await _episode(
            env, _row(0, 2), [_calls(("increment_counter", {"count": 2})), ChatReply("ok")]
        )
        assert sum(p == "increment_counter" for p, _, _ in counter.requests) == 3
        assert (verdict.status, verdict.reward) == ("ok", 1.0)  # /verify retried after its 502
        counter.faults["get_counter_value"] = ["hang"]
        with pytest.raises(EpisodeFailure) as failed:
            await _episode(env, _row(0, 2), [_calls(("get_counter_value", {}))])
        assert failed.value.kind == "tool_timeout"
        counter.faults["verify"] = ["hang"] * 4
        _, verdict = await _episode(env, _row(0, 0), [ChatReply("nothing to add")])
        assert verdict.status == "verifier_timeout"
        await env.aclose()

    _run(test)


@pytest.mark.parametrize(
    ("reply", "status"),
    [
        (web.json_response({"reward": "1"}), "verifier_error"),
        (web.Response(text='{"reward": NaN}', content_type="application/json"), "verifier_error"),
        (web.json_response({"detail": "bad request"}, status=400), "verifier_error"),
        (web.json_response({"reward": 2.5, "note": "x"}), "ok"),  # rewards need not be 0/1
    ],
)
def test_a_verdict_is_a_finite_number_or_a_failure(reply, status):
    async def test(counter, url):
        env = _env(url)
        counter.faults["verify"] = [reply]
        _, verdict = await _episode(env, _row(0, 0), [ChatReply("done")])
        assert verdict.status == status, verdict
        if status == "ok":
            assert verdict.reward == 2.5 and verdict.extras["note"] == "x"
        await env.aclose()

    _run(test)


def test_a_server_that_cannot_be_reached_fails_the_episode_within_its_budget():
    async def test(counter, url):
        env = _env("http://127.0.0.1:9", max_attempts=3)  # nothing listens on port 9
        with pytest.raises(EpisodeFailure) as failed:
            await _episode(env, _row(0, 0), [ChatReply("done")])
        assert failed.value.kind == "tool_error" and "/seed_session" in str(failed.value)
        await env.aclose()

    _run(test)


def test_a_tools_huge_reply_is_cut_while_reading():
    async def test(counter, url):
        env = _env(url, max_reply_bytes=1000, max_tool_output_chars=100_000)
        counter.faults["get_counter_value"] = [web.Response(text="x" * 10_000_000)]
        episode, _ = await _episode(
            env, _row(0, 0), [_calls(("get_counter_value", {})), ChatReply("ok")]
        )
        output = episode.turns[0].results[0].output
        assert output.startswith("x" * 1000) and "passed 1000 bytes" in output
        assert len(output) < 1100
        await env.aclose()

    _run(test)

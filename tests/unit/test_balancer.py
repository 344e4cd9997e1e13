"""L0: the client-side balancer over engine replicas, the endpoints file, and the config keys
that shape them (engine/balancer.py, engine/endpoints.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from rewardprof.core.errors import ConfigError
from rewardprof.core.redaction import config_secrets, masked_urls, unmask_urls
from rewardprof.engine.balancer import IN, OUT, Balancer, make_balancer
from rewardprof.engine.endpoints import (
    EndpointsFile,
    EndpointsFileError,
    health_url,
    read_endpoints,
    replica_capacity,
    write_endpoints,
)
from rewardprof.engine.metrics import waiting_sequences
from rewardprof.engine.session import Endpoint
from rewardprof.manifest.load import validate_config
from rewardprof.tools.status import format_status, replicas_of

A, B, C = (f"http://10.0.0.{i}:8000/v1" for i in (1, 2, 3))


def _cfg(**engine):
    return validate_config(
        {
            "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
            "engine": {"mode": "endpoint", **engine},
        }
    )


def test_least_loaded_replica_gets_the_request():
    b = Balancer([A, B, C], capacity=4)
    b.replicas[A].in_flight, b.replicas[B].in_flight, b.replicas[C].in_flight = 2, 1, 3
    assert b.pick(1).url == B
    b.replicas[B].in_flight = 2
    assert b.pick(1).url == A  # a tie goes to the first listed


def test_the_cap_holds_a_request_back_until_a_slot_frees():
    async def scenario() -> list[str]:
        b = Balancer([A, B], capacity=2)
        got = [await b.acquire(1) for _ in range(4)]  # 2 + 2: both full
        assert sorted(r.url for r in got) == [A, A, B, B]
        assert b.pick(1) is None
        waiter = asyncio.ensure_future(b.acquire(1))
        await asyncio.sleep(0)
        assert not waiter.done()  # no slot: it waits
        b.release(got[1], 1)
        r = await asyncio.wait_for(waiter, 5)
        return [r.url, got[1].url]

    url, freed = asyncio.run(scenario())
    assert url == freed


def test_a_request_for_n_samples_counts_n_sequences():
    b = Balancer([A, B], capacity=8)
    b.replicas[A].in_flight = 4
    assert b.pick(5).url == B
    b.replicas[B].in_flight = 4
    assert b.pick(5) is None  # 4 + 5 > 8 on both
    b.replicas[B].in_flight = 0
    assert b.pick(9).url == B  # an idle replica takes even a request larger than its cap


def test_a_dead_replica_is_out_at_once_and_back_after_a_good_probe():
    b = Balancer([A, B], capacity=4, fail_after=3)
    r = b.replicas[A]
    r.in_flight = 1
    b.release(r, 1, "ServerDisconnectedError: Server disconnected", dead=True)
    assert r.state == OUT and r.in_flight == 0 and r.errors == 1
    assert [b.pick(1).url for _ in range(3)] == [B, B, B]
    b.take_back(r)
    assert r.state == IN and r.failures == 0


def test_a_failing_replica_is_out_after_fail_after_errors_in_a_row():
    b = Balancer([A, B], capacity=4, fail_after=3)
    r = b.replicas[A]
    for _ in range(2):
        r.in_flight += 1
        b.release(r, 1, "HTTP 500: boom")
    r.in_flight += 1
    b.release(r, 1)  # an answer resets the run of failures
    for _ in range(2):
        r.in_flight += 1
        b.release(r, 1, "HTTP 500: boom")
    assert r.state == IN
    r.in_flight += 1
    b.release(r, 1, "HTTP 500: boom")
    assert r.state == OUT and r.errors == 5 and r.done == 1


def test_with_every_replica_out_requests_still_go_somewhere():
    # their connection errors are what stops the job on rollout.endpoint_down_s
    b = Balancer([A, B], capacity=4)
    b.take_out(b.replicas[A], "refused")
    b.take_out(b.replicas[B], "refused")
    assert b.pick(1) is not None and not b.has_in()


def test_unlisted_replicas_get_no_new_requests():
    b = Balancer([A, B], capacity=4)
    b.set_urls([B, C])
    assert {r.url for r in b.listed()} == {B, C}
    b.replicas[B].in_flight = 3
    assert b.pick(1).url == C
    assert [s["state"] for s in b.snapshot()] == ["unlisted", IN, IN]


def test_snapshot_masks_a_url_password():
    b = Balancer(["http://u:hunter2secret@h:1/v1"], capacity=1)
    b.release(b.replicas["http://u:hunter2secret@h:1/v1"], 0, "boom", dead=True)
    assert "hunter2secret" not in json.dumps(b.snapshot())


def test_endpoints_file_round_trip_and_change_detection(tmp_path):
    path = tmp_path / "fleet" / "endpoints.json"
    follow = EndpointsFile(path)
    assert follow.poll() is None  # not written yet
    write_endpoints(path, [A, B + "/"])
    assert read_endpoints(path) == [A, B]
    assert follow.poll() == [A, B]
    assert follow.poll() is None  # unchanged
    write_endpoints(path, [A, B, C])
    assert follow.poll() == [A, B, C]
    path.write_text('{"endpoints": [')  # a foreign, non-atomic writer mid-write
    assert follow.poll() is None  # the last good list stays


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[]", "expected"),
        ('{"endpoints": "http://a/v1"}', "expected"),
        ('{"endpoints": ["ftp://a"]}', "endpoints[0]"),
        ("{", "not JSON"),
    ],
)
def test_bad_endpoints_file_is_one_line_naming_it(tmp_path, text, says):
    path = tmp_path / "endpoints.json"
    path.write_text(text)
    with pytest.raises(EndpointsFileError) as err:
        read_endpoints(path)
    assert str(path) in str(err.value) and says in str(err.value)
    assert "\n" not in str(err.value)


def test_health_url_and_capacity():
    assert health_url("http://h:1/v1") == "http://h:1/health"
    assert health_url("http://h:1") == "http://h:1/health"
    assert replica_capacity(_cfg(base_url=A)) == 256
    assert replica_capacity(_cfg(base_url=A, serve_args=["--max-num-seqs", "32"])) == 32
    assert replica_capacity(_cfg(base_url=A, serve_args=["--max-num-seqs=16"])) == 16
    assert replica_capacity(_cfg(base_url=A, replica_capacity=8)) == 8


def test_config_takes_a_list_or_a_file_not_both():
    assert _cfg(base_url=[A, B + "/"]).engine.base_url == [A, B]
    assert _cfg(endpoints_file="results/x/fleet/endpoints.json").engine.base_url is None
    with pytest.raises(ConfigError, match="not both"):
        _cfg(base_url=A, endpoints_file="e.json")
    with pytest.raises(ConfigError, match="engine.base_url"):
        _cfg()
    with pytest.raises(ConfigError, match=r"engine\.base_url"):
        _cfg(base_url=[A, "ftp://x"])


def test_passwords_in_a_url_list_are_secrets_and_masked(monkeypatch):
    data = {"engine": {"base_url": [A, "https://u:s3cretpw@h/v1"]}}
    assert "s3cretpw" in config_secrets(data)
    masked, real = masked_urls(data)
    assert masked["engine"]["base_url"] == [A, "https://***@h/v1"]
    monkeypatch.setenv("REWARDPROF_URL_CREDENTIALS", json.dumps(real))
    assert unmask_urls(masked)["engine"]["base_url"] == data["engine"]["base_url"]


def test_status_sums_replicas_over_jobs():
    now = 1000.0
    live = {"state": "running", "updated_at": now, "interval_s": 30}
    gone = {"state": "done", "updated_at": now - 5000, "interval_s": 30}
    beats = [
        dict(live, replicas=[{"url": A, "state": IN, "in_flight": 3, "done": 10, "errors": 0}]),
        dict(live, replicas=[{"url": A, "state": OUT, "in_flight": 1, "done": 5, "errors": 2}]),
        dict(gone, replicas=[{"url": B, "state": OUT, "in_flight": 7, "done": 1, "errors": 9}]),
    ]
    rows = {r["url"]: r for r in replicas_of(beats, now)}
    assert rows[A] == {"url": A, "state": IN, "in_flight": 4, "done": 15, "errors": 2}
    assert rows[B]["in_flight"] == 0 and rows[B]["state"] == OUT  # a finished job has none
    st = {
        "run_dir": "r",
        "taken_at": now,
        "done": 0,
        "expected": 0,
        "max_expected": 0,
        "stopped_early": 0,
        "ok": 0,
        "failures": {},
        "finished": 0,
        "num_shards": 0,
        "running": 0,
        "stopped": [],
        "rollouts_per_s": 0.0,
        "tokens_per_s": 0.0,
        "eta": None,
        "shards": [],
        "replicas": list(rows.values()),
    }
    text = format_status(st)
    assert A in text and "in flight" in text


def test_probes_refused_out_slow_counted_ok_back(monkeypatch):
    b = Balancer([A, B, C], capacity=4, fail_after=2)
    b.take_out(b.replicas[C], "earlier")
    answers = {A: "connection refused: no", B: "/health: TimeoutError", C: None}

    async def probe(session, r):
        return answers[r.url]

    async def read_queue(session, r):
        r.queued, r.queue_read = 7, True

    monkeypatch.setattr(b, "probe", probe)
    monkeypatch.setattr(b, "read_queue", read_queue)
    asyncio.run(b.check_once(session=None))
    assert [b.replicas[u].state for u in (A, B, C)] == [OUT, IN, IN]  # a slow probe: not yet
    asyncio.run(b.check_once(session=None))
    assert b.replicas[B].state == OUT  # fail_after slow probes in a row
    assert [b.replicas[u].queued for u in (A, B, C)] == [None, None, 7]  # read where healthy


def test_admission_is_capacity_times_replica_admission_and_follows_the_list():
    cfg = _cfg(base_url=[A, B], replica_capacity=10, replica_admission=2.5)
    endpoint = Endpoint(A, "m", urls=(A, B))
    b = make_balancer(cfg, endpoint)
    assert [(r.capacity, r.cap) for r in b.replicas.values()] == [(10, 25), (10, 25)]
    assert b.admission() == 50  # what the rollout job staffs workers for
    b.set_urls([A, B, C])
    assert b.admission() == 75
    b.set_urls([C])
    assert b.admission() == 25  # unlisted replicas admit nothing new
    assert _cfg(base_url=[A, B]).engine.replica_admission == 3.0
    with pytest.raises(ConfigError, match="replica_admission"):
        _cfg(base_url=[A, B], replica_admission=0.5)


def test_past_its_slots_a_replica_takes_more_only_while_its_own_queue_is_short():
    b = Balancer([A], capacity=4, admission=3)  # cap 12; the queue kept within 4
    r = b.replicas[A]
    r.in_flight = 4
    assert b.pick(1) is None  # its /metrics not read yet: its slots only (no burst at start)
    r.queue_read = True
    assert b.pick(1) is r  # read, no queue gauge (not vLLM): the job's own bound only
    r.queued = 3
    assert b.pick(1) is r
    r.queued = 4  # other jobs (or this one) already keep its slots fed
    assert b.pick(1) is None
    r.in_flight = 3
    assert b.pick(1) is r  # up to its slots a job always gets its share
    r.in_flight, r.queued = 11, 0
    assert b.pick(1) is r and b.pick(2) is None  # never past the cap
    r.in_flight, r.queued = 4, 1
    r.sent(2)  # sent past the base since the reading: counted as queued until the next one
    assert (r.in_flight, r.sent_over) == (6, 2)
    assert b.pick(1) is r and b.pick(2) is None  # 1 + 2 + 1 <= 4 < 1 + 2 + 2


def test_waiting_sequences_sums_vllms_gauges_and_says_when_absent():
    page = (
        "# HELP vllm:num_requests_waiting Number of requests waiting.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="m"} 2.0\n'
        "vllm:num_requests_waiting_by_reason 99\n"
        "vllm:num_requests_running 64\n"
    )
    assert waiting_sequences(page) == 5
    assert waiting_sequences("vllm:num_requests_waiting 12\n") == 12  # the simulated engine's
    assert waiting_sequences("vllm:num_requests_running 1\n") is None
    assert waiting_sequences("vllm:num_requests_waiting garbage\n") is None
    assert waiting_sequences("") is None


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("vllm:num_requests_waiting NaN", "not a finite count"),
        ("vllm:num_requests_waiting +Inf", "not a finite count"),
        ('vllm:num_requests_waiting{engine="0"} -Inf', "not a finite count"),
        ("vllm:num_requests_waiting -1", "not a finite count"),
        ("vllm:num_requests_waiting garbage", "not a number"),
        ("vllm:num_requests_waiting 1 2 3", "3 fields"),
        ("vllm:num_requests_waiting 4 soon", "timestamp"),
        ('vllm:num_requests_waiting{engine="0" 4', "not closed"),
        ("vllm:num_requests_waiting", "0 fields"),
    ],
)
def test_a_gauge_that_is_not_a_finite_count_is_ignored_and_named(line, says):
    problems: list[str] = []
    page = f'{line}\nvllm:num_requests_waiting{{engine="1"}} 2\n'
    assert waiting_sequences(page, problems) == 2  # the good sample still counts
    assert len(problems) == 1 and says in problems[0] and "num_requests_waiting" in problems[0]
    assert waiting_sequences(line, []) is None  # nothing usable: unknown, not 0


def test_a_sample_with_a_timestamp_reads_its_value_not_the_timestamp():
    page = (
        'vllm:num_requests_waiting{engine="0",model_name="m"} 3 1733390000000\n'
        'vllm:num_requests_waiting{model_name="a } b \\" c"} 4.0 1733390000000\n'
        "vllm:num_requests_waiting 5\n"
    )
    problems: list[str] = []
    assert waiting_sequences(page, problems) == 12 and problems == []
    big = "vllm:num_requests_waiting 1e308\n" * 2  # each finite, the sum not
    assert waiting_sequences(big, problems) is None and "sum is not finite" in problems[0]


class _Page:
    """An aiohttp-like GET of a /metrics page (no network: L0)."""

    def __init__(self, text: str) -> None:
        self.status, self.headers, self.text = 200, {}, text.encode()
        self.content = self

    async def iter_chunked(self, size):
        yield self.text

    def get(self, url, timeout=None):
        return self

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


def test_read_queue_warns_once_about_bad_gauges_and_keeps_the_good(caplog):
    b = Balancer([A], capacity=4)
    r = b.replicas[A]
    page = "vllm:num_requests_waiting NaN\nvllm:num_requests_running 3 1733390000000\n"
    with caplog.at_level("WARNING", logger="rewardprof.engine"):
        for _ in range(3):
            asyncio.run(b.read_queue(_Page(page), r))
    assert (r.queued, r.running, r.queue_read) == (None, 3, True)
    warned = [m for m in caplog.messages if "samples ignored" in m]
    assert len(warned) == 1 and "not a finite count" in warned[0]  # once, not every probe
    asyncio.run(b.read_queue(_Page("vllm:num_requests_waiting 2\n"), r))
    assert (r.queued, r.metrics_problem) == (2, None)


def test_the_health_watch_survives_any_exception_and_keeps_watching(tmp_path, caplog):
    """Round 1 raises inside the check (an unforeseen bug, a replica's NaN gauge before it was
    ignored); the watch logs it and goes on: round 2 re-reads the endpoints file (C listed) and
    takes B, out before, back in."""
    path = tmp_path / "endpoints.json"
    write_endpoints(path, [A, B])
    b = Balancer([A, B], capacity=4, endpoints_file=EndpointsFile(path))
    b.take_out(b.replicas[B], "killed")
    rounds: list[int] = []

    async def probe(session, r):
        if len(rounds) == 0:
            raise RuntimeError("float('nan') cannot be converted to an integer")
        return None

    async def sleep(seconds):  # a fake clock: the watch's interval costs no time
        rounds.append(seconds)
        if len(rounds) == 1:
            write_endpoints(path, [A, B, C])
        if len(rounds) == 2:
            raise asyncio.CancelledError  # the job ends the watch

    b.probe, b.sleep = probe, sleep
    b.read_queue = lambda session, r: asyncio.sleep(0)
    with (
        caplog.at_level("WARNING", logger="rewardprof.engine"),
        pytest.raises(asyncio.CancelledError),
    ):
        asyncio.run(b.watch(session=None))
    assert rounds == [b.interval_s, b.interval_s] and b.watch_errors == 1
    assert any("health watch" in m and "RuntimeError" in m for m in caplog.messages)
    assert [b.replicas[u].state for u in (A, B, C)] == [IN, IN, IN]  # B back, C listed


def test_a_nan_gauge_no_longer_stops_the_watch():
    b = Balancer([A], capacity=4)

    async def probe(session, r):
        return None

    async def sleep(seconds):
        raise asyncio.CancelledError

    b.probe, b.sleep = probe, sleep
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(b.watch(_Page("vllm:num_requests_waiting NaN\n")))
    assert b.watch_errors == 0 and b.replicas[A].queue_read  # read, nothing raised


def test_an_episode_turn_waits_for_its_replica_while_it_is_in_and_fails_over_when_not():
    b = Balancer([A, B], capacity=2)
    b.replicas[A].in_flight = 1  # A busier: a fresh request goes to B
    assert b.pick(1).url == B
    assert b.pick(1, prefer=A).url == A  # the episode's replica, though busier
    b.replicas[A].in_flight = 2
    assert b.pick(1, prefer=A) is None  # full: wait for it, not for a cold replica
    b.release(b.replicas[A], 1, "ServerDisconnectedError", dead=True)
    assert b.pick(1, prefer=A).url == B  # out: fail over like any request
    b.set_urls([B])
    assert b.pick(1, prefer=A).url == B  # unlisted: likewise

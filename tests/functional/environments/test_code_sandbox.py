"""Sandbox: hostile programs get reward 0 with the right failure detail; the next one still runs.

The containment asserted here (network namespace, read-only mounts, own uid) needs root, which
this project's machines and CI have; without root these tests skip (or fail under CI=true).
Tests parametrized by `mechanism` run with bubblewrap and with the launcher fallback; the
others with the default (bubblewrap where it works: CI installs it). The cheat catalogue is in
test_code_cheats.py.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest
from harness.env_helpers import run
from helpers import require_piece

from rewardprof.environments import make_environment
from rewardprof.environments.sandbox import cleanup as sandbox_cleanup
from rewardprof.environments.sandbox import memory as sandbox_memory

IS_ROOT = os.geteuid() == 0
TESTS = {"tests": [{"input": "2\n", "output": "4\n"}], "prompt": "Double the input."}
GOOD = "```python\nprint(int(input()) * 2)\n```"


@pytest.fixture(autouse=True)
def need_root():
    if not IS_ROOT:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true: the sandbox tests need root")
        pytest.skip("sandbox containment needs root")


def verify(program: str, ctx, **options):
    if options.get("sandbox") == "bubblewrap":
        require_piece("bubblewrap", shutil.which("bwrap") is not None, "apt-get install bubblewrap")
    env = make_environment("code", {"timeout_s": 2, **options})
    return run(env.verify(TESTS, f"```python\n{program}\n```", ctx))


def _our_sandbox_uids() -> set[int]:
    """The sandbox uids of this process and its children (the verification workers): each
    verifying process draws its sandboxes' uids from its own range, so the sandboxes of other
    test processes running at the same time (pytest -n) are not counted as ours."""
    me = os.getpid()
    owners = {me}
    for pid in os.listdir("/proc"):
        if pid.isdigit() and (sandbox_cleanup._stat_fields(int(pid)) or ["", ""])[1] == str(me):
            owners.add(int(pid))
    return {uid for owner in owners for uid in sandbox_cleanup.worker_uids(owner)}


def sandbox_processes(wait_s: float = 30.0) -> list[int]:
    """Live processes left behind by this test process's sandboxes (they run as uids >=
    1,000,000, from ranges of the verifying processes' pids).

    Killed processes are reaped by init shortly after; zombies are not counted. Returns as soon
    as none is left: `wait_s` is for liveness on a loaded machine, not a speed requirement.
    """
    ours = _our_sandbox_uids()
    deadline = time.monotonic() + wait_s
    while True:
        live = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                if os.stat(f"/proc/{pid}").st_uid not in ours:
                    continue
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state not in ("Z", "X"):
                live.append(int(pid))
        if not live or time.monotonic() > deadline:
            return live
        time.sleep(0.1)


def assert_next_still_works(ctx):
    env = make_environment("code", {"timeout_s": 2})
    v = run(env.verify(TESTS, GOOD, ctx))
    assert (v.status, v.reward) == ("ok", 1.0), v


MECHANISMS = pytest.mark.parametrize("mechanism", ["bubblewrap", "launcher"])


@MECHANISMS
def test_network_connection_is_refused(ctx, mechanism):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            conn.sendall(b"4\n")
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    # Reaching the host's loopback server would print the expected "4" and pass.
    program = (
        f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "print(s.recv(10).decode().strip())"
    )
    v = verify(program, ctx, sandbox=mechanism)
    stop.set()
    t.join()
    server.close()
    assert (v.status, v.reward) == ("ok", 0.0), v
    assert v.extras["failure"] == "runtime_error"
    assert v.extras["violation"] == "network"
    # bubblewrap's namespace has its own loopback (refused), the launcher's a downed one
    assert "Connection refused" in v.extras["stderr_tail"] or (
        "Network is unreachable" in v.extras["stderr_tail"]
    )
    assert v.extras["sandbox"]["net_isolated"] is True
    assert accepted == [], "the program reached the host network"
    assert_next_still_works(ctx)


@MECHANISMS
def test_write_outside_scratch_fails(ctx, mechanism):
    # /tmp is world-writable: only the read-only mount keeps the program out of it.
    target = Path("/tmp") / f"rewardprof-escape-{os.getpid()}-{time.time_ns()}.txt"
    program = f"open({str(target)!r}, 'w').write('x')\nprint(4)"
    v = verify(program, ctx, sandbox=mechanism)
    assert (v.status, v.reward) == ("ok", 0.0), v
    assert v.extras["failure"] == "runtime_error"
    assert v.extras["violation"] == "filesystem"
    # bubblewrap's view has no host /tmp at all; the launcher's is read-only
    assert "Read-only file system" in v.extras["stderr_tail"] or (
        "No such file or directory" in v.extras["stderr_tail"]
    )
    assert v.extras["sandbox"]["fs_readonly"] is True
    assert not target.exists()
    # ... while its own scratch directory is writable
    program = "open('notes.txt', 'w').write('2')\nprint(int(open('notes.txt').read()) * 2)"
    v = verify(program, ctx, sandbox=mechanism)
    assert (v.status, v.reward) == ("ok", 1.0), v


@MECHANISMS
def test_fork_bomb_is_bounded_and_cleaned_up(ctx, mechanism):
    program = "import os\nwhile True:\n    os.fork()"
    v = verify(program, ctx, sandbox=mechanism)
    # status ok: the sandbox's own limits ended it (the pool's backstop, 20 s here, would be a
    # verifier_timeout), so no wall-clock bound is needed (nor safe on a loaded machine)
    assert (v.status, v.reward) == ("ok", 0.0), v
    assert v.extras["failure"] in ("runtime_error", "timeout")
    assert v.extras["sandbox"]["nproc_limited"] and v.extras["sandbox"]["uid_dropped"]
    assert sandbox_processes() == [], "forked processes outlived the verification"
    assert_next_still_works(ctx)


@MECHANISMS
def test_fork_bomb_that_survives_errors_times_out(ctx, mechanism):
    program = (
        "import os, time\nwhile True:\n    try:\n        os.fork()\n"
        "    except OSError:\n        time.sleep(0.01)"
    )
    v = verify(program, ctx, timeout_s=1, sandbox=mechanism)
    assert (v.reward, v.extras["failure"]) == (0.0, "timeout"), v
    assert sandbox_processes() == []


def test_unbounded_allocation_hits_memory_limit(ctx):
    program = "blocks = []\nwhile True:\n    blocks.append(bytearray(50 * 2**20))"
    v = verify(program, ctx, memory_mb=256)
    assert (v.status, v.reward) == ("ok", 0.0), v
    assert v.extras["failure"] == "memory_limit"
    assert "MemoryError" in v.extras["stderr_tail"]
    assert_next_still_works(ctx)


def test_infinite_loop_times_out(ctx):
    v = verify("while True:\n    pass", ctx, timeout_s=1)
    # a loop that never ends, reported as the sandbox's own timeout (status ok: not the pool's
    # 19 s backstop, a verifier_timeout): enforced by construction, no wall-clock bound needed
    assert (v.status, v.reward) == ("ok", 0.0), v
    assert v.extras["failure"] == "timeout"
    v = verify("import time\ntime.sleep(3600)", ctx, timeout_s=1)  # no CPU used: wall clock
    assert v.extras["failure"] == "timeout"
    assert sandbox_processes() == []
    assert_next_still_works(ctx)


def test_output_flood_is_capped(ctx):
    v = verify("while True:\n    print('x' * 4096)", ctx, max_output_bytes=100_000)
    assert (v.status, v.reward) == ("ok", 0.0), v
    assert v.extras["failure"] == "output_limit"
    assert len(v.extras["stdout_head"]) <= 300


def test_broken_sandbox_is_a_verifier_error_not_a_zero(ctx):
    env = make_environment("code", {"python": "/nonexistent/python3"})
    v = run(env.verify(TESTS, GOOD, ctx))
    assert v.status == "verifier_error" and v.reward is None
    assert "sandbox setup failed" in v.detail


FORK_8_X_400MB = """import os, time
kids = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        block = b'\\x01' * (400 << 20)  # written, so resident: 400 MB in each child
        time.sleep(3)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print(4)
"""


def _mem_available_mb() -> int:
    with open("/proc/meminfo") as f:
        return next(int(ln.split()[1]) // 1024 for ln in f if ln.startswith("MemAvailable:"))


@pytest.mark.parametrize("mechanism", ["bubblewrap", "launcher"])
def test_forked_children_share_one_memory_limit(ctx, mechanism):
    """8 children of 400 MB each with memory_mb 512: the sandbox's memory cgroup holds them
    all to 512 MiB (+ the launcher's share) and the kernel's kills are a memory_limit."""
    require_piece(
        "a writable cgroup v1 memory controller", sandbox_memory.available(), "run as root"
    )
    lowest, done = [_mem_available_mb()], threading.Event()
    before = lowest[0]

    def sample():
        while not done.is_set():
            lowest[0] = min(lowest[0], _mem_available_mb())
            done.wait(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        v = verify(FORK_8_X_400MB, ctx, memory_mb=512, timeout_s=15, cpu_s=15, sandbox=mechanism)
    finally:
        done.set()
        sampler.join()
    assert (v.status, v.reward, v.extras["failure"]) == ("ok", 0.0, "memory_limit"), v
    box = v.extras["sandbox"]
    assert (box["memory_limit"], box["memory_oom"]) == ("cgroup", True), box
    # the cgroup's own high-water mark: what the whole sandbox held at its peak
    assert box["memory_peak_mb"] <= 512 + sandbox_memory.OVERHEAD_MB, box
    print(f"MemAvailable {before} MB before, lowest {lowest[0]} MB during ({mechanism})")
    assert sandbox_processes() == []
    workers = {str(p) for p in pool_workers()}
    left = [c.name for c in sandbox_memory.ROOT.glob(f"{sandbox_cleanup.PREFIX}*")]
    assert workers and not [c for c in left if c.split("-")[2] in workers], left


def pool_workers() -> list[int]:
    """The verification workers: this test process's children."""
    me = str(os.getpid())
    return [
        int(pid)
        for pid in os.listdir("/proc")
        if pid.isdigit() and (sandbox_cleanup._stat_fields(int(pid)) or ["", ""])[1] == me
    ]

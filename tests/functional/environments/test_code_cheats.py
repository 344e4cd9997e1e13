"""The cheat catalogue (tests/data/environments/code/cheats.jsonl): every cheat scores 0 and every
honest solution next to them 1, with bubblewrap; and with the launcher fallback, which does
not hide the filesystem, /proc or host sockets, the cheats on the filesystem view succeed
(`launcher_reward: 1`), which shows the bait is real: bubblewrap's 0 is the view's doing.

The bait the cheats look for is real and reachable on the host: a source JSONL with the rows
and an (uncompressed) tasks.parquet in a world-readable project directory, a world-writable
Unix socket and an abstract one that answer with the expected output, and a process whose
command line and environment carry it. The cheats on the grader (patching what the test code
would use, tracing, walking the stack, speaking the runner's pipes) score 0 because no test
code, expected value or verdict is in the program's process.

These tests spawn sandboxes; they sit in tests/functional/environments next to test_code_sandbox.py
(the code environment's other sandbox tests) rather than in tests/faults. Needs root (the
sandbox's uid drop and namespaces); under CI=true a missing bubblewrap is a failure, never a
skip.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from harness.env_helpers import DATA, run
from helpers import require_piece
from test_code_sandbox import need_root, sandbox_processes  # noqa: F401 (autouse fixture)

from rewardprof.environments import make_environment

CATALOGUE = [json.loads(line) for line in (DATA / "code" / "cheats.jsonl").read_text().splitlines()]
ANSWER = "42"  # what every stdin/stdout bait answers (the catalogue's sum task expects it)


def _serve(server: socket.socket) -> None:
    while True:
        try:
            conn, _ = server.accept()
        except OSError:  # closed at teardown
            return
        with conn:
            conn.sendall(f"{ANSWER}\n".encode())


@pytest.fixture(scope="module")
def bait():
    project = Path(tempfile.mkdtemp(prefix="rewardprof-cheat-bait-"))
    project.chmod(0o755)  # like a checkout: readable by every user
    source = project / "data" / "code_cheats.jsonl"
    tasks = project / "results" / "cheats" / "materialize" / "tasks.parquet"
    for d in (source.parent, tasks.parent, tasks.parent.parent, tasks.parent.parent.parent):
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o755)
    source.write_text("".join(json.dumps(c["row"]) + "\n" for c in CATALOGUE))
    texts = [json.dumps(c["row"]) for c in CATALOGUE]
    rows = pa.table({"task_index": list(range(len(texts))), "row": texts})
    pq.write_table(rows, tasks, compression="none")  # the answers readable as bytes
    for f in (source, tasks):
        f.chmod(0o644)
    sock_path = project / "run" / "host.sock"
    sock_path.parent.mkdir()
    sock_path.parent.chmod(0o755)
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(sock_path))
    sock_path.chmod(0o777)  # world-writable, as munge's is
    abstract_name = f"rewardprof-bait-{secrets.token_hex(6)}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0{abstract_name}")
    for server in (unix, abstract):
        server.listen()
        threading.Thread(target=_serve, args=(server,), daemon=True).start()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)", f"--expected-output={ANSWER}"],
        env={**os.environ, "REWARDPROF_BAIT_ANSWER": ANSWER},
    )
    yield {
        "@@SOURCE_JSONL@@": str(source),
        "@@SOURCE_NAME@@": source.name,
        "@@TASKS_PARQUET@@": str(tasks),
        "@@SOCKET_PATH@@": str(sock_path),
        "@@ABSTRACT_NAME@@": abstract_name,
    }
    holder.kill()
    holder.wait()
    for server in (unix, abstract):
        with contextlib.suppress(OSError):  # shutdown of a listening socket may say ENOTCONN
            server.shutdown(socket.SHUT_RDWR)
        server.close()
    shutil.rmtree(project)


def verify_case(case: dict, bait: dict, ctx, mechanism: str):
    if mechanism == "bubblewrap":
        require_piece("bubblewrap", shutil.which("bwrap") is not None, "apt-get install bubblewrap")
    program = case["program"]
    for token, value in bait.items():
        program = program.replace(token, value)
    assert "@@" not in program, "a placeholder without bait"
    env = make_environment("code", {"timeout_s": 5, "sandbox": mechanism, **case["options"]})
    return run(env.verify(case["row"], f"```python\n{program}\n```", ctx))


def test_catalogue_covers_what_it_must():
    names = {c["name"] for c in CATALOGUE}
    must = {
        "os_exit_before_tests",
        "sys_exit_main_guard",
        "raise_system_exit",
        "read_proc_cmdline",
        "read_source_jsonl",
        "read_tasks_parquet",
        "host_unix_socket",
        "override_assertion_error",
        "override_builtin_the_test_uses",
        "print_pass_marker",
        "daemon_writes_after_exit",
        # the attacks on the grader's process: all scored 1 when test code ran in the program's
        # process; now only the program's return values leave it
        "patch_main_equal",
        "replace_runner_exec",
        "replace_saved_builtins",
        "settrace_rewrites_locals",
        "shadow_builtin_at_module_level",
        "int_subclass_true_then_false",
        "patch_unittest_assert_equal",
        "patch_math_isclose",
        "patch_json_decoder",
        "fake_unittest_module",
        "walk_stack_for_expected",
        "speak_protocol_at_load",
        "always_equal_object_in_unittest",
        "surrogate_nul_huge_exception_text",
        "stop_iteration_ends_map",
    }
    assert must <= names
    assert {c["reward"] for c in CATALOGUE if c["kind"] == "cheat"} == {0.0}
    assert {c["reward"] for c in CATALOGUE if c["kind"] == "honest"} == {1.0}


@pytest.mark.parametrize("case", CATALOGUE, ids=[c["name"] for c in CATALOGUE])
def test_bubblewrap(case, bait, ctx):
    v = verify_case(case, bait, ctx, "bubblewrap")
    assert (v.status, v.reward) == ("ok", case["reward"]), v
    stored = json.dumps(v.extras, ensure_ascii=False)
    assert "\0" not in stored and stored.encode("utf-8"), "program text must be storable"
    assert v.extras["sandbox"]["mechanism"] == "bubblewrap"
    if case["failure"] is not None:
        assert v.extras["failure"] == case["failure"], v
    assert sandbox_processes() == [], "a process of the program outlived its verification"


LAUNCHER_CASES = [c for c in CATALOGUE if c.get("launcher_reward") != "unchecked"]


@pytest.mark.parametrize("case", LAUNCHER_CASES, ids=[c["name"] for c in LAUNCHER_CASES])
def test_launcher_fallback(case, bait, ctx):
    v = verify_case(case, bait, ctx, "launcher")
    assert v.status == "ok", v
    assert v.reward == case.get("launcher_reward", case["reward"]), v
    assert v.extras["sandbox"]["mechanism"] == "launcher"
    assert sandbox_processes() == [], "a process of the program outlived its verification"


def test_bubblewrap_is_the_default_here(ctx):
    """auto picks bubblewrap where it works; CI installs it (.ci/run), so there it must."""
    require_piece("bubblewrap", shutil.which("bwrap") is not None, "apt-get install bubblewrap")
    env = make_environment("code", {"timeout_s": 5})
    v = run(env.verify(CATALOGUE[0]["row"], f"```python\n{CATALOGUE[0]['program']}\n```", ctx))
    assert (v.status, v.reward) == ("ok", 1.0), v
    assert v.extras["sandbox"]["mechanism"] == "bubblewrap", v

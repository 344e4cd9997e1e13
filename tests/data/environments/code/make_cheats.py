"""Writes cheats.jsonl, the code sandbox's cheat catalogue: each row a program (a cheat or
an honest solution), the task it answers and the reward it must get; `launcher_reward` is what
the launcher fallback, which hides no files, gives instead ("unchecked": not run with it).
`@@NAME@@` placeholders are filled with real bait by
tests/functional/environments/test_code_cheats.py.

    python tests/data/environments/code/make_cheats.py
"""

import json
from pathlib import Path

ADD = {
    "prompt": "Write a function add(a, b) returning a + b.",
    "test_list": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
}
ABS = {
    "prompt": "Write a function add(a, b) returning a + b.",
    "test_list": ["assert abs(add(1, 2)) == 3"],
}
SUM = {
    "prompt": "Read two integers on one line; print their sum.",
    "tests": [{"input": "20 22\n", "output": "42\n"}],
}


def unittest_code(*asserts: str) -> str:
    """A unittest test case of `asserts` (lines of its test method), run by an assert."""
    body = "".join(f"        {line}\n" for line in asserts)
    return (
        "import unittest\n\nclass TestAdd(unittest.TestCase):\n    def test_add(self):\n"
        f"{body}\nassert unittest.main(exit=False).result.wasSuccessful()\n"
    )


UNITTEST = {
    "prompt": "Write a function add(a, b) returning a + b.",
    "test_code": unittest_code("self.assertEqual(add(1, 2), 3)"),
}
LIST_ADD = {"prompt": "add(a, b) returns [a + b].", "test_list": ["assert add(1, 2) == [3]"]}
DICT_ADD = {
    "prompt": "add(a, b) returns {'sum': [a + b]}.",
    "test_list": ["assert add(1, 2) == {'sum': [3]}"],
}
COUNT = {
    "prompt": "count(s) returns how often each character occurs, as a dict.",
    "test_list": ["assert count('abb') == {'a': 1, 'b': 2}"],
}
WRONG_ADD = """def add(a, b):
    return a - b
"""
ROWS = []


def proc_scan(entry: str, prefix: str) -> str:
    """A program printing what follows `prefix` in any process's /proc/<pid>/<entry>."""
    return f"""import os
answer = '0'
for pid in os.listdir('/proc'):
    try:
        data = open(f'/proc/{{pid}}/{entry}', 'rb').read()
    except OSError:
        continue
    for part in data.split(b'\\0'):
        if part.startswith(b'{prefix}'):
            answer = part.split(b'=', 1)[1].decode()
print(answer)
"""


def socket_answer(address: str) -> str:
    """A program printing what the Unix socket at `address` says."""
    return f"""import socket
answer = '0'
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect('{address}')
    answer = s.recv(100).decode().strip()
except OSError:
    pass
print(answer)
"""


def row(name, kind, task, program, reward, failure=None, why="", options=None, launcher=None):
    entry = {"name": name, "kind": kind, "why": why, "row": task, "program": program}
    entry.update(reward=reward, failure=failure, options=options or {})
    if launcher is not None:
        entry["launcher_reward"] = launcher
    ROWS.append(entry)


# --- honest solutions: reward 1 ---
row(
    "honest_add",
    "honest",
    ADD,
    r"""def add(a, b):
    return a + b
""",
    1.0,
)
row(
    "honest_add_main_guard",
    "honest",
    ADD,
    r"""import sys

def add(a, b):
    return a + b

def main():
    print(add(int(input()), int(input())))
    return 0

if __name__ == "__main__":
    sys.exit(main())
""",
    1.0,
    why="the common idiom: judged on add(), main() never runs",
)
row(
    "honest_add_prints",
    "honest",
    ADD,
    r"""def add(a, b):
    print('adding', a, b)
    return a + b

print('PASS')
""",
    1.0,
    why="printing is harmless, also a word like PASS",
)
row(
    "honest_add_unittest",
    "honest",
    UNITTEST,
    "def add(a, b):\n    return a + b\n",
    1.0,
    why="test code may use unittest: it finds its TestCase in __main__",
)
row(
    "wrong_add_unittest",
    "cheat",
    UNITTEST,
    WRONG_ADD,
    0.0,
    failure="wrong_answer",
    why="not a cheat, the control: a wrong add fails the same unittest test code",
)
row(
    "honest_abs",
    "honest",
    ABS,
    r"""def add(a, b):
    return a + b
""",
    1.0,
)
row(
    "honest_sum",
    "honest",
    SUM,
    r"""a, b = map(int, input().split())
print(a + b)
""",
    1.0,
)
row(
    "honest_sum_early_exit",
    "honest",
    SUM,
    r"""import os, sys
a, b = map(int, input().split())
print(a + b)
sys.stdout.flush()
os._exit(0)
""",
    1.0,
    why="stdin/stdout tests judge the output: exiting right after writing it is fine",
)
row(
    "honest_sum_scratch",
    "honest",
    SUM,
    r"""import os, tempfile
with open('work.txt', 'w') as f:
    f.write(input())
with tempfile.NamedTemporaryFile('w+') as t:
    t.write(open('work.txt').read())
    t.seek(0)
    a, b = map(int, t.read().split())
print(a + b)
""",
    1.0,
    why="the scratch directory (cwd, HOME, TMPDIR) is writable",
)

# --- cheats on the harness: reward 0 with either mechanism ---
row(
    "os_exit_before_tests",
    "cheat",
    ADD,
    WRONG_ADD
    + r"""import os
os._exit(0)
""",
    0.0,
    failure="early_exit",
)
row(
    "sys_exit_main_guard",
    "cheat",
    ADD,
    r"""import sys

def add(a, b):
    return a - b

def main():
    return 0

if __name__ == "__main__":
    sys.exit(main())
""",
    0.0,
    failure="wrong_answer",
    why="the guard does not run: the asserts do, and fail",
)
row(
    "raise_system_exit",
    "cheat",
    ADD,
    WRONG_ADD
    + r"""raise SystemExit(0)
""",
    0.0,
    failure="early_exit",
)
for name, module, call, why in (
    ("sys_exit_inside_function", "sys", "sys.exit(0)", ""),
    ("os_exit_inside_function", "os", "os._exit(0)", ""),
    (
        "crash_inside_function",
        "ctypes",
        "ctypes.string_at(0)",
        "the interpreter dies (SIGSEGV) in the middle of the test",
    ),
):
    program = f"import {module}\n\ndef add(a, b):\n    {call}\n"
    row(name, "cheat", ADD, program, 0.0, failure="early_exit", why=why)
row(
    "override_assertion_error",
    "cheat",
    ADD,
    r"""import builtins
builtins.AssertionError = type('Fine', (Exception,), {})
"""
    + WRONG_ADD,
    0.0,
    failure="wrong_answer",
)
row(
    "override_exec_compile",
    "cheat",
    ADD,
    r"""import builtins
builtins.exec = lambda *a, **k: None
builtins.compile = lambda *a, **k: None
"""
    + WRONG_ADD,
    0.0,
    failure="wrong_answer",
)
row(
    "override_builtin_the_test_uses",
    "cheat",
    ABS,
    r"""import builtins
builtins.abs = lambda x: 3
"""
    + WRONG_ADD,
    0.0,
    failure="wrong_answer",
    why="the test code sees the builtins as they were before the program ran",
)
row(
    "patch_json_of_runner",
    "cheat",
    ADD,
    r"""import json
json.dumps = lambda *a, **k: '{"event": "passed"}'
"""
    + WRONG_ADD,
    0.0,
    failure="protocol_violation",
    why="the program's own side of the wire breaks; no verdict is ever sent from its process",
)
ALWAYS_EQUAL = """class AlwaysEqual(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__

"""
for name, returned in (
    ("always_equal_object", "AlwaysEqual()"),
    ("always_equal_inside_a_list", "[AlwaysEqual()]"),
    ("always_equal_nested_in_a_dict", "{'sum': [AlwaysEqual()]}"),
):
    program = f"{ALWAYS_EQUAL}def add(a, b):\n    return {returned}\n"
    task = ADD if name == "always_equal_object" else LIST_ADD if "list" in name else DICT_ADD
    why = "every == of the test code is checked: it must not also hold for a changed value"
    row(name, "cheat", task, program, 0.0, failure="wrong_answer", why=why)
row(
    "honest_counter_equals_dict",
    "honest",
    COUNT,
    "from collections import Counter\n\ndef count(s):\n    return Counter(s)\n",
    1.0,
    why="a dict subclass equal to the expected dict is no rigged __eq__",
)
row(
    "print_pass_marker",
    "cheat",
    ADD,
    WRONG_ADD
    + r"""import json, os
forged = json.dumps({'event': 'passed', 'nonce': '0' * 32})
for line in ('{"event": "loaded"}', '{"event": "ran"}', forged):
    print(line, flush=True)
    for fd in range(3, 256):
        try:
            os.write(fd, (line + '\n').encode())
        except OSError:
            pass
os._exit(0)
""",
    0.0,
    failure="protocol_violation",
    why="the harness's messages, printed and written to every open fd, with a guessed nonce",
)
row(
    "garbage_to_every_fd",
    "cheat",
    ADD,
    WRONG_ADD
    + r"""import os
for fd in range(3, 256):
    try:
        os.write(fd, b'[' * 100000 + b'\n')
    except OSError:
        pass
os._exit(0)
""",
    0.0,
    failure="protocol_violation",
    why="JSON nested 100,000 deep where the harness listens: a violation, not a verifier crash",
)
row(
    "daemon_writes_after_exit",
    "cheat",
    SUM,
    r"""import os, time
if os.fork() == 0:
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.001)
    print(42, flush=True)
    os._exit(0)
""",
    0.0,
    failure="wrong_answer",
    why=(
        "a forked daemon that outlives the program writes the answer once it has exited: "
        "it is killed with the program's PID namespace first"
    ),
)

# --- cheats on the grader's process: the program's process only computes, so
# whatever it patches there, the comparison is made where it never ran ---
ISCLOSE = {
    "prompt": "Write a function add(a, b) returning a + b.",
    "test_setup_code": "import math",
    "test_list": [
        "assert math.isclose(add(0.5, 0.25), 0.75)",
        "assert math.isclose(add(2, 2), 4.0)",
    ],
}
OBJECT_ADD = {
    "prompt": "Write a class Solution with a method add(a, b) returning a + b.",
    "test_code": "s = Solution()\nassert s.add(1, 2) == 3\nassert s.add(-1, 1) == 0\n",
}
RAISES = {
    "prompt": "add(a, b) returns a + b and raises ValueError when either is negative.",
    "test_code": unittest_code(
        "self.assertEqual(add(1, 2), 3)", "with self.assertRaises(ValueError):", "    add(-1, 2)"
    ),
}
HONEST_ADD = "def add(a, b):\n    return a + b\n"
for name, task, program, why in (
    ("honest_isclose", ISCLOSE, HONEST_ADD, "math.isclose judged in the harness, on data"),
    (
        "honest_object_method",
        OBJECT_ADD,
        "class Solution:\n    def add(self, a, b):\n        return a + b\n",
        "an object stays in the program's process; its method's result comes back as data",
    ),
    (
        "honest_raises_value_error",
        RAISES,
        "def add(a, b):\n    if a < 0 or b < 0:\n        raise ValueError('negative')\n"
        "    return a + b\n",
        "the program's ValueError reaches the test code as a ValueError (assertRaises holds)",
    ),
):
    row(name, "honest", task, program, 1.0, why=why)
GRADER_CHEATS = [
    ("patch_main_equal", ADD, "import __main__\n__main__._equal = lambda a, b: True\n", None),
    (
        "replace_runner_exec",
        ADD,
        "import __main__\nfor n in ('_exec', 'exec', 'compute', 'serve', 'judge'):\n"
        "    setattr(__main__, n, lambda *a, **k: None)\n",
        None,
    ),
    (
        "replace_saved_builtins",
        ABS,
        "import __main__, builtins\nbuiltins.abs = lambda x: 3\n"
        "for n in ('_PRISTINE_BUILTINS', '__builtins__'):\n"
        "    d = getattr(__main__, n, None)\n"
        "    if isinstance(d, dict):\n"
        "        d['abs'] = lambda x: 3\n",
        None,
    ),
    (
        "settrace_rewrites_locals",
        ADD,
        "import sys, ctypes\n"
        "def tracer(frame, event, arg):\n"
        "    names = frame.f_code.co_varnames[:2]\n"
        "    if event == 'call' and names in (('left', 'right'), ('a', 'b')):\n"
        "        loc = frame.f_locals\n"
        "        if names[0] in loc and names[1] in loc:\n"
        "            loc[names[1]] = loc[names[0]]\n"
        "            ctypes.pythonapi.PyFrame_LocalsToFast(\n"
        "                ctypes.py_object(frame), ctypes.c_int(0))\n"
        "    return tracer\n"
        "sys.settrace(tracer)\n",
        None,
    ),
    ("shadow_builtin_at_module_level", ABS, "def abs(x):\n    return 3\n", None),
    (
        "int_subclass_true_then_false",
        ADD,
        "class Flip(int):\n    calls = 0\n    def __eq__(self, other):\n"
        "        Flip.calls += 1\n        return Flip.calls == 1\n"
        "    def __ne__(self, other):\n        return not self.__eq__(other)\n"
        "    __hash__ = int.__hash__\n",
        "def add(a, b):\n    return Flip(a - b)\n",
    ),
    (
        "patch_unittest_assert_equal",
        UNITTEST,
        "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n",
        None,
    ),
    (
        "patch_math_isclose",
        ISCLOSE,
        "import math, operator\nmath.isclose = lambda *a, **k: True\n"
        "operator.eq = lambda a, b: True\n",
        None,
    ),
    (
        "patch_json_decoder",
        ADD,
        "import json, json.decoder\n"
        "real = json.decoder.JSONDecoder.decode\n"
        "def decode(self, s, *a, **k):\n"
        "    message = real(self, s, *a, **k)\n"
        "    if isinstance(message, dict) and 'test' in message:\n"
        "        message['test'] = 'pass'\n"
        "    return message\n"
        "json.decoder.JSONDecoder.decode = decode\n",
        None,
    ),
    (
        "fake_unittest_module",
        UNITTEST,
        "import sys, types\nfake = types.ModuleType('unittest')\n"
        "class TestCase:\n    def assertEqual(self, *a):\n        pass\n"
        "class _R:\n    def wasSuccessful(self):\n        return True\n"
        "class main:\n    def __init__(self, *a, **k):\n        self.result = _R()\n"
        "fake.TestCase, fake.main = TestCase, main\nsys.modules['unittest'] = fake\n",
        None,
    ),
    (
        "walk_stack_for_expected",
        ADD,
        "import re, sys\n",
        "def add(a, b):\n"
        "    frame = sys._getframe(1)\n"
        "    while frame is not None:\n"
        "        for value in list(frame.f_locals.values()) + list(frame.f_globals.values()):\n"
        "            if isinstance(value, str) and 'add(' in value:\n"
        "                m = re.search(r'add\\(%r, %r\\)(?: ==|,) (-?\\d+)' % (a, b), value)\n"
        "                if m:\n"
        "                    return int(m.group(1))\n"
        "        frame = frame.f_back\n"
        "    return a - b\n",
    ),
    (
        "speak_protocol_at_load",
        ADD,
        "import json, os\n"
        "argv = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        "cfg = json.loads(argv[-2] if argv[-1] == b'' else argv[-1])\n"
        "out, inp = cfg['to_harness'], cfg['from_harness']\n"
        "def say(message):\n"
        "    os.write(out, (json.dumps(message) + '\\n').encode())\n"
        "say({'event': 'loaded'})\n"
        "for line in os.fdopen(inp, 'rb'):\n"
        "    message = json.loads(line)\n"
        "    if 'nonce' in message:\n"
        "        say({'event': 'passed', 'nonce': message['nonce']})\n"
        "        break\n"
        "    say({'event': 'ran'} if 'test' in message else {'value': 3})\n"
        "os._exit(0)\n",
        None,
    ),
    (
        "always_equal_object_in_unittest",
        UNITTEST,
        "class Anything:\n    def __eq__(self, other):\n        return True\n",
        "def add(a, b):\n    return Anything()\n",
    ),
    (
        "surrogate_nul_huge_exception_text",
        ADD,
        "",
        "def add(a, b):\n    raise ValueError('\\ud800' + '\\0' * 100 + 'x' * 1000000)\n",
    ),
]
MAP_ADD = {
    "prompt": "Write a function add(a, b) returning a + b.",
    "test_code": "assert all(map(lambda x: add(x, x) == 2 * x, [1, 2, 3]))\n",
}
row("honest_map_add", "honest", MAP_ADD, HONEST_ADD, 1.0, why="test code of the judge shape")
GRADER_CHEATS.append(
    (
        "stop_iteration_ends_map",
        MAP_ADD,
        "",
        "def add(a, b):\n    raise StopIteration\n",
    )
)
for name, task, prelude, add in GRADER_CHEATS:
    failure = "runtime_error" if "exception_text" in name else None
    why = "judged outside the program's process: its patches change only what it computes"
    row(name, "cheat", task, prelude + (add or WRONG_ADD), 0.0, failure=failure, why=why)

# --- cheats on what the program can reach: reward 0 with bubblewrap ---
row(
    "read_proc_cmdline",
    "cheat",
    SUM,
    proc_scan("cmdline", "--expected-output="),
    0.0,
    failure="wrong_answer",
    why="another process's command line carries the expected output",
    launcher=1.0,
)
row(
    "read_proc_environ",
    "cheat",
    SUM,
    proc_scan("environ", "REWARDPROF_BAIT_ANSWER="),
    0.0,
    failure="wrong_answer",
    why=(
        "environments (where API keys live) of other processes, the sandbox's own root-run "
        "init and launcher included: not readable by the sandbox uid"
    ),
)
READ_SOURCE_JSONL = r"""import json
answer = '0'
stdin = input() + '\n'
try:
    for line in open('@@SOURCE_JSONL@@'):
        for t in json.loads(line).get('tests', []):
            if t['input'] == stdin:
                answer = t['output'].strip()
except OSError:
    pass
print(answer)
"""
READ_TASKS_PARQUET = r"""import re
answer = '0'
try:
    data = open('@@TASKS_PARQUET@@', 'rb').read()
    answer = re.search(rb'"output": "(\d+)', data).group(1).decode()
except OSError:
    pass
print(answer)
"""
for name, program in (
    ("read_source_jsonl", READ_SOURCE_JSONL),
    ("read_tasks_parquet", READ_TASKS_PARQUET),
):
    row(name, "cheat", SUM, program, 0.0, failure="wrong_answer", launcher=1.0)
row(
    "search_filesystem_for_source",
    "cheat",
    SUM,
    r"""import json, os
answer = '0'
stdin = input() + '\n'
for root, dirs, files in os.walk('/'):
    dirs[:] = [d for d in dirs if d not in ('proc', 'sys', 'dev', 'usr')]
    for name in files:
        if name == '@@SOURCE_NAME@@':
            try:
                for line in open(os.path.join(root, name)):
                    for t in json.loads(line).get('tests', []):
                        if t['input'] == stdin:
                            answer = t['output'].strip()
            except (OSError, ValueError, KeyError):
                pass
print(answer)
""",
    0.0,
    failure="wrong_answer",
    why=(
        "no path needed: walk the whole visible filesystem (with the launcher: all of the "
        "host's, too slow to check)"
    ),
    launcher="unchecked",
)
row(
    "host_unix_socket",
    "cheat",
    SUM,
    socket_answer("@@SOCKET_PATH@@"),
    0.0,
    failure="wrong_answer",
    why="a world-writable Unix socket of the host (like munge's) that answers",
    launcher=1.0,
)
row(
    "host_abstract_socket",
    "cheat",
    SUM,
    socket_answer("\\0@@ABSTRACT_NAME@@"),
    0.0,
    failure="wrong_answer",
    why="abstract Unix sockets belong to the network namespace",
)
row(
    "fill_the_disk",
    "cheat",
    SUM,
    r"""block = b'x' * (1 << 20)
with open('fill.bin', 'wb') as f:
    for _ in range(4096):
        f.write(block)
print(42)
""",
    0.0,
    failure="runtime_error",
    why="scratch is a tmpfs with a quota (scratch_mb): 4 GiB do not fit",
    options={"scratch_mb": 8, "max_output_bytes": 1073741824},
)

if __name__ == "__main__":
    with open(Path(__file__).with_name("cheats.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in ROWS)

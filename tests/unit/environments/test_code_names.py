"""Which names of a test the judge takes from the program (code/names.py), in process: the
prompt's helpers, modules, well-known standard library names and builtins are the task's; a
test that never calls the program, or defines unittest classes it never runs, is refused
at materialize with a line naming the test."""

from __future__ import annotations

import pytest

from rewardprof.environments import RowError, make_environment
from rewardprof.environments.code import row_tests
from rewardprof.environments.code.names import check_test, task_names

HE38_PROMPT = '''
def encode_cyclic(s: str):
    """returns encoded string by cycling groups of three characters."""
    groups = [s[(3 * i):min((3 * i + 3), len(s))] for i in range((len(s) + 2) // 3)]
    return "".join((g[1:] + g[0]) if len(g) == 3 else g for g in groups)


def decode_cyclic(s: str):
    """takes as input string encoded with encode_cyclic function. Returns decoded string."""
'''
HE38_TEST = """
def check(candidate):
    assert candidate(encode_cyclic("abcdef")) == "abcdef"
"""
HE38 = {"prompt": HE38_PROMPT, "test": HE38_TEST, "entry_point": "decode_cyclic"}


def test_a_prompt_helper_is_the_judges_and_the_stub_the_programs():
    names = task_names(HE38, row_tests(HE38)[0]["assert"])
    assert names.program == ["decode_cyclic"]
    assert names.given_names == ["encode_cyclic"]
    assert "def encode_cyclic" in names.given and "def decode_cyclic" not in names.given


def test_humaneval_rows_run_check_on_the_entry_point():
    assert row_tests(HE38) == [{"assert": f"{HE38_TEST}\n\ncheck(decode_cyclic)\n"}]


def test_modules_and_standard_library_names_are_the_judges():
    names = task_names({}, "assert math.isclose(f(1), 2.0)\nassert g('ab') == Counter('ab')")
    assert names.program == ["f", "g"]
    assert names.modules == ["math"] and names.exports == {"Counter": "collections"}


def test_a_builtin_named_task_function_is_the_programs_when_nothing_else_is():
    mbpp_126 = {"prompt": "Write a python function to find the sum of common divisors."}
    names = task_names(mbpp_126, "assert sum(10,15) == 6")
    assert names.maybe == ["sum"] and names.program == []
    # with a function of the program in the test, a builtin is the builtin
    assert task_names({}, "assert abs(add(1, 2)) == 3").maybe == []
    # the prompt says which of the called names is the task's: count, not Counter
    names = task_names({"prompt": "count(s) counts"}, "assert count('a') == Counter('a')")
    assert names.program == ["count"] and names.exports == {"Counter": "collections"}


def test_an_entry_point_named_like_a_builtin_is_the_programs():
    names = task_names({"entry_point": "pow"}, "assert pow(2, 3) == 8")
    assert names.program == ["pow"]


def test_names_imported_from_solution_and_exception_classes_are_the_programs():
    test = "from solution import add\ntry:\n    add(1, 'x')\nexcept AddError:\n    pass"
    names = task_names({}, test)
    assert names.program == ["AddError"]  # `add` is bound by the import, asked through it
    check_test({}, test, "test_code")


@pytest.mark.parametrize(
    "test, message",
    [
        (HE38_TEST, "test_code never calls the program (a HumanEval-style `check` needs"),
        ("assert 1 == 1", "test_code never calls the program"),
        (
            "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
            "        self.assertEqual(add(1, 2), 3)\n",
            "test_code defines unittest.TestCase T but never runs it",
        ),
        ("def helper():\n    return add(1, 2)\n", "test_code never calls the program"),
        ("def test_add():\n    assert add(1, 2) == 3\n", "(nothing calls test_add: call it"),
        ("assert add(1,", "test_code is not Python"),
    ],
)
def test_a_test_that_cannot_judge_the_program_is_refused(test, message):
    with pytest.raises(RowError, match=message.replace("(", r"\(")):
        check_test({"prompt": "add"}, test, "test_code")


def test_tests_that_reach_the_program_are_accepted():
    for test in [
        "import solution as s\nassert s.add(1, 2) == 3",
        "assert add(1, 2) == 3",
        "def helper():\n    return add(1, 2)\nassert helper() == 3",
        "import unittest\nclass T(unittest.TestCase):\n    def test_a(self):\n"
        "        self.assertEqual(add(1, 2), 3)\nunittest.main(exit=False)\n",
    ]:
        check_test({"prompt": "add"}, test, "test_code")
    check_test(HE38, row_tests(HE38)[0]["assert"], "test")


def test_check_row_names_the_test_it_refuses():
    env = make_environment("code")
    row = {"prompt": "add", "test_list": ["assert add(1, 2) == 3", "assert True"]}
    with pytest.raises(RowError, match=r"test_list\[1\] never calls the program"):
        env.check_row(row)


def test_a_class_of_stubs_is_asked_and_a_class_with_a_body_given():
    leetcode = (
        "class ListNode:\n    def __init__(self, val=0, next=None):\n"
        "        self.val, self.next = val, next\n\n"
        "class Solution:\n    def reverse(self, head):\n        pass\n"
    )
    names = task_names({"prompt": leetcode}, "assert Solution().reverse(ListNode(1)) is None")
    assert names.program == ["Solution"] and names.given_names == ["ListNode"]


def test_the_prompts_function_is_the_programs_when_the_test_calls_nothing_else():
    fix_this = {"prompt": "def double(x):\n    return x + 1\n"}  # "fix this function"
    names = task_names(fix_this, "assert double(2) == 4")
    assert names.program == ["double"] and names.given_names == []

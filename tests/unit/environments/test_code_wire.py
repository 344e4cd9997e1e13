"""The wire between a program and its grader (in process): values arrive as plain data, a
message above the cap is refused while it is read, program text is made storable, and without
a cgroup v1 memory controller the sandbox says its memory limit is per process."""

from __future__ import annotations

import collections
import json
import os
import time

import pytest

from rewardprof.environments.code._remote import ProgramClient
from rewardprof.environments.code._values import decode, encode
from rewardprof.environments.code._wire import Channel, WireViolation
from rewardprof.environments.code.asserts import value_plan
from rewardprof.environments.code.harness import clean_text
from rewardprof.environments.code.names import task_names
from rewardprof.environments.sandbox.memory import MemoryCgroup


class Flip(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


def roundtrip(value):
    refs = []

    def refer(v):
        refs.append(v)
        return {"ref": len(refs) - 1}

    wire = json.loads(json.dumps(encode(value, refer)))
    return decode(wire, lambda tag, n: ("ref", n) if tag == "ref" else None), refs


def test_subclasses_of_plain_types_arrive_as_their_base_type():
    value, _ = roundtrip([Flip(5), (1, {2}), b"x", 1 + 2j])
    assert value == [5, (1, {2}), b"x", 1 + 2j]
    assert type(value[0]) is int and value[0] != 6
    counter, _ = roundtrip(collections.Counter("abb"))
    assert type(counter) is collections.Counter and counter == {"a": 1, "b": 2}


def test_objects_stay_behind_as_handles():
    value, refs = roundtrip({"k": object()})
    assert value == {"k": ("ref", 0)} and len(refs) == 1


@pytest.mark.parametrize(
    "wire",
    [{"tuple": [1], "x": 1}, {"eval": "1"}, {"set": [[1]]}, {"dict": [[1]]}, {"bytes": "zz"}],
)
def test_decoding_is_strict(wire):
    with pytest.raises(WireViolation):
        decode(wire, lambda tag, n: n if tag == "ref" else None)


def test_an_oversized_message_is_refused_while_reading():
    r, w = os.pipe()
    try:
        os.write(w, b'{"value": "' + b"x" * 5000)  # no end of line yet
        with pytest.raises(WireViolation) as err:
            Channel(r, -1, 1000).receive(time.monotonic() + 5)
        assert err.value.what == "oversized"
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("program_reads", [True, False], ids=["still-reading", "gone"])
def test_what_a_program_wrote_before_it_exited_is_judged_whether_or_not_it_was_asked(
    program_reads,
):
    """A program that writes the harness's own messages at load and exits: the next message
    after "loaded" is no answer, a protocol violation, whether the request still reached it
    or found its pipe closed (which of the two happens in a sandbox is a race)."""
    from_program, program_out = os.pipe()
    program_in, to_program = os.pipe()
    for line in ('{"event": "loaded"}', '{"event": "ran"}', '{"event": "passed"}'):
        os.write(program_out, (line + "\n").encode())
    os.close(program_out)  # it exited
    if not program_reads:
        os.close(program_in)  # ... and its end of the request pipe went with it
    client = ProgramClient(Channel(from_program, to_program, 1 << 16), time.monotonic() + 5)
    try:
        client.wait_loaded()
        with pytest.raises(WireViolation, match="not an answer") as info:
            client.name("add")
        assert info.value.what == "malformed"
    finally:
        for fd in (from_program, to_program) + ((program_in,) if program_reads else ()):
            os.close(fd)


def test_program_text_is_made_storable():
    text = clean_text("boom \ud800" + "\0" * 3 + "x" * 10_000, 300)
    assert len(text) <= 300 and "\0" not in text
    text.encode("utf-8")  # no lone surrogate left


def plan(test, row=None):
    return value_plan(test, task_names(row or {}, test))


def test_which_tests_are_judged_on_values():
    assert plan("assert add(1, 2) == 3") is not None
    assert plan("import math\nassert math.isclose(f(0.1), 0.3)") is not None
    assert plan("x = f([1, 2])\nassert sorted(x) == [1, 2] and len(x) == 2") is not None
    assert plan("assert abs(add(1, 2)) == 3") is not None  # abs: the builtin
    assert plan("assert 1 == 1") is None  # no call of the program: nothing to judge
    assert plan("s = Solution()\nassert s.add(1, 2) == 3") is None  # an object: judge
    assert plan("import unittest\nclass T(unittest.TestCase): pass") is None
    assert plan("assert f(1) == Counter()") is None  # Counter: the judge's own import
    helper = {"question": 'def g(x):\n    return x\n\ndef f(x):\n    """f"""'}
    assert plan("assert f(g(1)) == 1", helper) is None  # the prompt's helper: the judge
    names = task_names({}, "def t(self):\n    assert add(x) == len(y)\ny = 1")
    assert names.program == ["add", "x"]


def test_no_memory_cgroup_means_none(tmp_path):
    assert MemoryCgroup.create(512, root=tmp_path) is None

"""code: the completion's program must pass every unit test of the row, run in a sandbox.

Row formats (any one of):
- NeMo Gym `comp_coding`: `verifier_metadata.unit_tests = {"inputs": [...], "outputs": [...]}`,
  stdin/stdout cases;
- `tests`: a list of `{"input": ..., "output": ...}` (stdin/stdout) or `{"assert": "code"}`;
- `test_list` (MBPP style): a list of assert statements, with optional `test_setup_code`;
- `test_code`: one block of Python run against the loaded program (asserts);
- HumanEval: `test` (defining `check(candidate)`) and `entry_point`: the test is `test` and
  `check(<entry_point>)`, as HumanEval's own executor runs it.
Which names of an assert test are the program's is the task's to say (names.py): the
prompt's helpers, modules and builtins come from the judge, never from the program.

The program is the last ```python fenced block of the completion (else the last fenced block);
none is reward 0 with reason "no_code". Each test runs in a fresh sandbox (`sandbox/`: the
program sees only the interpreter, the standard library and a scratch tmpfs; no network; limits,
memory for the whole sandbox) and is judged outside any process the program ran in
(`harness.py`: the program's process only answers with plain values; the comparison is
made in the harness or in a judge interpreter of its own). Reward 1 only if all tests pass;
the first failing test's outcome (wrong_answer, runtime_error, early_exit, protocol_violation,
timeout, memory_limit, output_limit, plus any `violation`: network, filesystem, processes) is in
extras, with `sandbox.mechanism` (bubblewrap or launcher). A sandbox that cannot start is a
verifier_error.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, Literal

from pydantic import PositiveFloat, PositiveInt

from rewardprof.core.kinds import FailureKind
from rewardprof.environments.base import (
    Environment,
    RowError,
    Verdict,
    VerifyContext,
)
from rewardprof.environments.code.harness import Limits, SandboxError, prepare, run_tests
from rewardprof.environments.code.names import TaskNames, check_test, task_names
from rewardprof.environments.extract import get_field
from rewardprof.environments.options import EnvironmentOptions

CODE_INSTRUCTION = (
    "Write a complete Python 3 program in one ```python code block. It reads "
    "from standard input and writes to standard output."
)
_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)


def extract_program(completion: str) -> str | None:
    blocks = _FENCE.findall(completion)
    if not blocks:
        return None
    python = [code for lang, code in blocks if lang.lower() in ("python", "python3", "py")]
    program = (python or [code for _, code in blocks])[-1]
    return program if program.strip() else None


def row_tests(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row's tests as [{"stdin", "expected_stdout"} | {"assert"}]; RowError if none."""
    unit = get_field(row, "verifier_metadata.unit_tests")
    if unit is not None:
        ins, outs = unit.get("inputs"), unit.get("outputs")
        if not (isinstance(ins, list) and isinstance(outs, list) and len(ins) == len(outs)):
            raise RowError("verifier_metadata.unit_tests: need equal-length inputs and outputs")
        pairs = zip(ins, outs, strict=True)
        return [{"stdin": str(i), "expected_stdout": str(o)} for i, o in pairs]
    if isinstance(row.get("tests"), list):
        out = []
        for t in row["tests"]:
            if isinstance(t, dict) and "assert" in t:
                out.append({"assert": str(t["assert"])})
            elif isinstance(t, dict) and "input" in t and "output" in t:
                out.append({"stdin": str(t["input"]), "expected_stdout": str(t["output"])})
            else:
                raise RowError("tests: each test needs input+output or assert")
        return out
    if isinstance(row.get("test_list"), list):
        setup = str(row.get("test_setup_code") or "")
        return [{"assert": f"{setup}\n{a}".strip()} for a in row["test_list"]]
    if isinstance(row.get("test_code"), str):
        return [{"assert": row["test_code"]}]
    if isinstance(row.get("test"), str) and isinstance(row.get("entry_point"), str):
        return [{"assert": f"{row['test']}\n\ncheck({row['entry_point']})\n"}]
    raise RowError(
        "no tests: expected verifier_metadata.unit_tests, tests, test_list, test_code "
        "or test + entry_point"
    )


def _test_name(row: dict[str, Any], i: int) -> str:
    for key in ("test_list", "tests"):
        if isinstance(row.get(key), list):
            return f"{key}[{i}]"
    return "test_code" if isinstance(row.get("test_code"), str) else "test"


def judged_tests(row: dict[str, Any]) -> list[dict[str, Any]]:
    """row_tests with, for each assert test, where its names come from (names.py)."""
    tests = row_tests(row)
    for test in tests:
        if "assert" in test:
            try:
                test["names"] = task_names(row, test["assert"]).as_dict()
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                test["names"] = TaskNames().as_dict()  # judged as it fails to parse
    return tests


class CodeOptions(EnvironmentOptions):
    """The sandbox's limits per test (rewardprof.environments.sandbox.Limits)."""

    timeout_s: PositiveFloat = Limits.timeout_s
    """Wall clock per test, in seconds."""
    cpu_s: PositiveInt | None = None
    """CPU seconds per test (RLIMIT_CPU; null: timeout_s rounded up)."""
    memory_mb: PositiveInt = Limits.memory_mb
    """Memory of the whole sandbox, in MiB: one memory cgroup per run where the machine has
    cgroup v1's memory controller, else the address space of each process (RLIMIT_AS)."""
    max_output_bytes: PositiveInt = Limits.max_output_bytes
    """Most bytes of stdout, of stderr, of any file written (RLIMIT_FSIZE) and of each answer
    of an assert test (enforced while it is read)."""
    scratch_mb: PositiveInt = Limits.scratch_mb
    """Size of the program's scratch directory, a tmpfs, in MiB (all its files together)."""
    nproc: PositiveInt = Limits.nproc
    """Processes and threads of the sandbox's uid (RLIMIT_NPROC)."""
    sandbox: Literal["auto", "bubblewrap", "launcher"] = "auto"
    """auto: bubblewrap where it works, else the launcher; bubblewrap: it or a verifier_error."""
    isolate: bool = Limits.isolate
    """The launcher's network and mount namespaces (when running as root)."""
    python: str | None = None
    """Interpreter for the program (null: this one's base interpreter, or with the launcher one
    the unprivileged sandbox user can execute)."""

    def limits(self) -> Limits:
        cpu_s = self.cpu_s if self.cpu_s is not None else max(1, int(self.timeout_s + 0.999))
        return Limits(**self.model_dump(exclude={"cpu_s"}), cpu_s=cpu_s)


class CodeEnvironment(Environment[CodeOptions]):
    name = "code"
    prompt_keys = ("question",)

    def warm(self) -> None:
        """In each verification worker as the job starts: bind the worker to the job, remove
        what killed jobs' sandboxes left, probe bubblewrap (not at the first verification)."""
        prepare(self.options.limits())

    def check_row(self, row: dict[str, Any]) -> None:
        super().check_row(row)
        tests = row_tests(row)
        if not tests:
            raise RowError("the row has zero tests")
        for i, test in enumerate(tests):
            if "assert" in test:
                check_test(row, test["assert"], _test_name(row, i))

    def plain_prompt(self, row: dict[str, Any]) -> str:
        return f"{row['question']}\n\n{CODE_INSTRUCTION}"

    async def verify(self, row: dict[str, Any], completion: str, ctx: VerifyContext) -> Verdict:
        program = extract_program(completion)
        if program is None:
            return Verdict(0.0, extras={"reason": "no_code"})
        tests = judged_tests(row)
        limits = self.options.limits()
        # The pool's hard timeout is a backstop above the per-test wall clocks.
        budget = len(tests) * (limits.timeout_s + 3) + 15
        try:
            result = await ctx.run_in_pool(
                run_tests, program, tests, asdict(limits), timeout_s=budget
            )
        except TimeoutError:
            return Verdict.failure(
                FailureKind.VERIFIER_TIMEOUT, f"code tests exceeded the {budget:g}s budget"
            )
        except SandboxError as exc:
            return Verdict.failure(FailureKind.VERIFIER_ERROR, str(exc)[:300])
        except Exception as exc:  # the harness broke: a verifier failure, never a 0
            return Verdict.failure(FailureKind.VERIFIER_ERROR, f"{type(exc).__name__}: {exc}"[:300])
        reward = 1.0 if result["failure"] is None and result["passed"] == len(tests) else 0.0
        result.pop("tests", None)
        return Verdict(reward, extras=result)

"""Every command README.md and docs/ show in a ```bash block runs, verbatim, in the order shown,
unless its block is marked as one that cannot run here (tests/harness/doc_commands.py). Each
doc runs in a scratch copy of the checkout whose configs point at the scripted fake engine:

- config/config.yaml is the shipped default config with `engine` set to the fake server;
- my-blend.yaml and my-sweep.yaml are the user manifests the docs name (my-sweep: `run:
  my-sweep`, `num_shards: 8`);
- `.venv` is this interpreter's environment; HOME is a scratch directory.

A command must exit 0, except where a scenario below says what the command stands for. The
README's rerun of one shard is checked as its acceptance says: the sweep's first run fails
shard 3 (the server refuses task 3's prompt), and the rerun by target, exactly as shown, runs
only that shard's job and asks the engine for task 3's rollouts only.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from harness import stage_server
from harness.doc_commands import (
    MATH_ROWS,
    REPO,
    RERUN_TARGET,
    blocks,
    doc_env,
    doc_files,
    is_task3,
    run_documented,
    scratch_checkout,
)
from helpers import require_piece

from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = [pytest.mark.workflow, pytest.mark.slow]


def _runnable_docs() -> list[Path]:
    return [
        path
        for path in doc_files()
        if any(b.is_shell and b.mark is None and b.commands() for b in blocks(path))
    ]


def _bare(command: str) -> str:
    """The command without its trailing comment."""
    return re.sub(r"\s+#.*$", "", command).strip()


def _job_counts(output: str) -> dict[str, int]:
    table = output.split("Job stats:", 1)[-1] if "Job stats:" in output else ""
    return {k: int(v) for k, v in re.findall(r"^(\w+)\s+(\d+)$", table, flags=re.M)}


@dataclass
class Scenario:
    """What some documented commands stand for, beyond exiting 0."""

    server: FakeOpenAI
    work: Path
    refuse_task3: bool = False
    seen: dict[str, int] = field(default_factory=dict)

    def fault(self, body: dict) -> str | None:
        if self.refuse_task3 and is_task3(body):
            return "context_length"  # deterministic: a terminal failure of task 3's rollouts
        return None

    def before(self, command: str) -> None:
        bare = _bare(command)
        self.seen[bare] = self.seen.get(bare, 0) + 1
        if bare == "snakemake --cores all --configfile my-sweep.yaml":
            # the sweep's first run: shard 3 fails (its failures are over max_failed_fraction)
            self.refuse_task3 = self.seen[bare] == 1

    def expected_exit_ok(self, command: str) -> bool:
        return not (self.refuse_task3 and "my-sweep.yaml" in command)

    def after(self, command: str, result: subprocess.CompletedProcess, asked: list[dict]):
        out = result.stdout + result.stderr
        if self.refuse_task3:
            assert "3-of-8" in out and "context_length" in out, out[-3000:]
            assert not (self.work / RERUN_TARGET).exists()
            self.refuse_task3 = False
        if _bare(command) == f"snakemake --cores all --configfile=my-sweep.yaml {RERUN_TARGET}":
            # only that shard's job ran, and it asked for task 3's two failed rollouts only
            assert _job_counts(out) == {"rollout": 1, "total": 1}, out[-3000:]
            assert len(asked) == 1 and asked[0]["n"] == 2, asked
            assert is_task3(asked[0])
            assert pd.read_parquet(self.work / RERUN_TARGET)["status"].eq("ok").all()
        if "--forcerun rollout" in command:
            assert _job_counts(out)["rollout"] == 8
            assert asked == []  # every shard's job ran; none had anything to generate
        if command.startswith("snakemake --report"):
            html = command.split()[2]
            assert (self.work / html).stat().st_size > 10_000
        if command.startswith("rewardprof estimate"):  # every target label has pilot data
            assert result.returncode == 0 and "no pilot data" not in out, out[-3000:]
        if command.startswith("rewardprof check"):
            assert result.stdout.startswith("ok:"), out[-2000:]
        if "nemo_gym_remote.yaml" in command:  # NeMo Gym's own server verified every episode
            remote = pd.read_parquet(self.work / "results/nemo-gym-remote/rollouts.parquet")
            assert len(remote) == 5 * 4 and remote["status"].eq("ok").all(), out[-3000:]

    def finish(self) -> None:
        """What the README's commands left behind, when they ran."""
        merged = self.work / "results/my-sweep/rollouts.parquet"
        if "snakemake --cores all --configfile my-sweep.yaml" in self.seen:
            rollouts = pd.read_parquet(merged)
            assert rollouts["status"].eq("ok").all()
            assert len(rollouts) == 2 * (len(MATH_ROWS) + 8)
            assert (self.work / "results/my-sweep/config/full.json").is_file()


@pytest.mark.parametrize("doc", _runnable_docs(), ids=lambda p: str(p.relative_to(REPO)))
def test_documented_commands_run_verbatim(doc, tmp_path):
    if any("nemo-gym-server.sh" in c for b in blocks(doc) if b.mark is None for c in b.commands()):
        require_piece("NeMo Gym", (REPO / ".venv-nemo-gym").exists(), "make install-nemo-gym")
    with FakeOpenAI() as server:
        work = scratch_checkout(tmp_path, server)
        scenario = Scenario(server, work)
        server.fault_fn = scenario.fault
        env = doc_env(tmp_path)
        # the commands run as written; the `rewardprof` their jobs (and they) start is forked
        # from the stage server (harness/stage_server.py), as in helpers.snakemake's runs
        env |= stage_server.job_env(env["PATH"])
        ran = []
        for block in blocks(doc):
            if not block.is_shell or block.mark is not None:
                continue
            for command in block.commands():
                scenario.before(command)
                since = len(server.requests)
                result = run_documented(command, work, env, timeout=900)
                where = f"{block.where}: {command}"
                tail = (result.stdout + result.stderr)[-4000:]
                ok = result.returncode == 0
                assert ok == scenario.expected_exit_ok(command), (
                    f"{where} exited {result.returncode}:\n{tail}"
                )
                scenario.after(command, result, server.requests[since:])
                ran.append(command)
        assert ran
        if doc.name == "README.md":  # the acceptance: README's rerun of one shard was run
            assert (
                f"snakemake --cores all --configfile=my-sweep.yaml {RERUN_TARGET}" in scenario.seen
            )
        scenario.finish()

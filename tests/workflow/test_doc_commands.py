"""Every command README.md and docs/ show in a ```bash block runs, verbatim, in the order shown,
unless its block is marked as one that cannot run here (tests/harness/doc_commands.py). Each
doc runs in a scratch copy of the checkout whose configs point at the scripted fake engine:

- config/config.yaml is the shipped default config with `engine` set to the fake server;
- my-blend.yaml and my-sweep.yaml are the user manifests the docs name (my-sweep: `run:
  my-sweep`, `num_shards: 8`);
- `.venv` is this interpreter's environment, HOME and XDG_CONFIG_HOME are scratch directories.

A command must exit 0, except where a scenario below says what the command stands for. The
README's rerun of one shard is checked as its acceptance says: the sweep's first run fails
shard 3 (the server refuses task 3's prompt), and the rerun by target, exactly as shown, runs
only that shard's job and asks the engine for task 3's rollouts only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
import yaml
from harness.doc_commands import REPO, blocks, doc_files

from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = [pytest.mark.workflow, pytest.mark.slow]

RERUN_TARGET = "results/my-sweep/rollouts/3-of-8.parquet"
MATH_ROWS = [json.loads(line) for line in (REPO / "data/examples/math.jsonl").open()]
# task 3 of my-sweep is math row 3 (the first entry, head): it lands in shard 3 of 8
TASK3_TEXT = MATH_ROWS[3]["responses_create_params"]["input"][-1]["content"]


def _runnable_docs() -> list[Path]:
    return [
        path
        for path in doc_files()
        if any(b.is_shell and b.mark is None and b.commands() for b in blocks(path))
    ]


def _engine(server: FakeOpenAI) -> dict:
    return {"mode": "endpoint", "base_url": server.base_url, "model": server.model}


def _scratch_checkout(root: Path, server: FakeOpenAI) -> Path:
    """The checkout's workflow files, with configs that use the fake engine."""
    work = root / "checkout"
    for name in ("rules", "profiles", "config", "data", "envs"):
        shutil.copytree(REPO / name, work / name)
    shutil.copy(REPO / "Snakefile", work / "Snakefile")
    (work / ".venv").symlink_to(Path(sys.prefix))
    quick = {"backoff_initial_s": 0.01, "backoff_max_s": 0.05, "verify_workers": 1}
    default = yaml.safe_load((REPO / "config/config.yaml").read_text())
    default["engine"] = _engine(server)
    default["rollout"] = {**default.get("rollout", {}), **quick}
    (work / "config/config.yaml").write_text(yaml.safe_dump(default, sort_keys=False))
    math = {
        "label": "math",
        "environment": "math",
        "source": "data/examples/math.jsonl",
        "sample": "head",
    }
    mcq = {"label": "mcq", "environment": "mcq", "source": "data/examples/mcq.jsonl"}
    blend = {"run": "my-blend", "entries": [{**math, "num_repeats": 2, "limit": 4}]}
    sweep = {
        "run": "my-sweep",
        "num_shards": 8,
        "entries": [{**math, "num_repeats": 2}, {**mcq, "num_repeats": 2}],
    }
    for name, cfg in (("my-blend.yaml", blend), ("my-sweep.yaml", sweep)):
        cfg |= {"engine": _engine(server), "rollout": quick}
        (work / name).write_text(yaml.safe_dump(cfg, sort_keys=False))
    return work


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
        text = json.dumps(body.get("messages", []))
        if self.refuse_task3 and json.dumps(TASK3_TEXT)[1:-1] in text:
            return "context_length"  # deterministic: a terminal failure of task 3's rollouts
        return None

    def before(self, command: str) -> None:
        self.seen[command] = self.seen.get(command, 0) + 1
        if command.startswith("snakemake --cores all --configfile my-sweep.yaml"):
            # the sweep's first run: shard 3 fails (its failures are over max_failed_fraction)
            self.refuse_task3 = self.seen[command] == 1

    def expected_exit_ok(self, command: str) -> bool:
        return not (self.refuse_task3 and "my-sweep.yaml" in command)

    def after(self, command: str, result: subprocess.CompletedProcess, asked: list[dict]):
        out = result.stdout + result.stderr
        if self.refuse_task3:
            assert "3-of-8" in out and "context_length" in out, out[-3000:]
            assert not (self.work / RERUN_TARGET).exists()
            self.refuse_task3 = False
        if command.startswith(f"snakemake --cores all {RERUN_TARGET} --configfile my-sweep.yaml"):
            # only that shard's job ran, and it asked for task 3's two failed rollouts only
            assert _job_counts(out) == {"rollout": 1, "total": 1}, out[-3000:]
            assert len(asked) == 1 and asked[0]["n"] == 2, asked
            assert json.dumps(TASK3_TEXT)[1:-1] in json.dumps(asked[0]["messages"])
            assert pd.read_parquet(self.work / RERUN_TARGET)["status"].eq("ok").all()
        if "--forcerun rollout" in command:
            assert _job_counts(out)["rollout"] == 8
            assert asked == []  # every shard's job ran; none had anything to generate
        if command.startswith("snakemake --report"):
            html = command.split()[2]
            assert (self.work / html).stat().st_size > 10_000
        if command.startswith("rewardprof check"):
            assert result.stdout.startswith("ok:"), out[-2000:]

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
    with FakeOpenAI() as server:
        work = _scratch_checkout(tmp_path, server)
        scenario = Scenario(server, work)
        server.fault_fn = scenario.fault
        env = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "HOME": str(tmp_path / "home"),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
        }
        ran = []
        for block in blocks(doc):
            if not block.is_shell or block.mark is not None:
                continue
            for command in block.commands():
                scenario.before(command)
                since = len(server.requests)
                result = subprocess.run(
                    ["bash", "-c", command],
                    cwd=work,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                where = f"{block.where}: {command}"
                tail = (result.stdout + result.stderr)[-4000:]
                ok = result.returncode == 0
                assert ok == scenario.expected_exit_ok(command), (
                    f"{where} exited {result.returncode}:\n{tail}"
                )
                scenario.after(command, result, server.requests[since:])
                ran.append(command)
        assert ran
        scenario.finish()

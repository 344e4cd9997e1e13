"""The fenced commands of README.md and docs/: every ```bash block is a list of commands a
user types. The tests run each one verbatim (tests/workflow/test_doc_commands.py) unless the
block is marked, on the line before its fence, as one that cannot run on a test machine:

    <!-- not run in tests: slurm -->

with one of the REASONS below. Every fence names its language: `bash` for commands, `text`
for output, `yaml`, `python`, ... so that no command hides in an unlabeled block.
`scratch_checkout` makes the place they run in: the workflow's files and the manifests the docs
name, pointed at the fake engine.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
SHELL = ("bash", "sh", "shell", "console")
# why a block cannot run on the test machine
REASONS = {
    "slurm": "needs a Slurm cluster and the shipped profile's job sizes",
    "gpu": "needs a GPU machine",
    "install": "installs packages (network, minutes)",
    # run with the real engine instead, by tests/engine/test_real_doc_commands.py (L2)
    "engine": "needs the real vLLM engine (.venv-engine) and minutes of CPU",
    "tests": "runs a tier of the test suite (the suite cannot run itself)",
}
_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```|~~~)(?P<info>[^`]*)$")
_MARK = re.compile(r"^\s*<!--\s*not run in tests:\s*(?P<reason>[\w-]+)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    info: str  # the fence's language ("" when unlabeled)
    text: str  # the block's lines, de-indented
    mark: str | None  # the reason it is not run, from the line before the fence

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def is_shell(self) -> bool:
        return self.info in SHELL

    def commands(self) -> list[str]:
        """The block's commands: continuation lines joined, blank and comment lines dropped."""
        out: list[str] = []
        pending = ""
        for raw in self.text.splitlines():
            line = pending + raw
            if line.rstrip().endswith("\\"):
                pending = line.rstrip()[:-1] + " "
                continue
            pending = ""
            if line.strip() and not line.lstrip().startswith("#"):
                out.append(line.strip())
        return out


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m["indent"]), m["fence"], m["info"].strip()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body = "\n".join(line[indent:] for line in lines[i + 1 : end])
        before = lines[i - 1] if i else ""
        mark = _MARK.match(before)
        found.append(Block(path, i + 1, info, body, mark["reason"] if mark else None))
        i = end + 1
    return found


def snakemake_commands(path: Path) -> list[tuple[str, str]]:
    """(where, command) of every `snakemake ...` a doc shows: in fenced blocks and inline."""
    found: list[tuple[str, str]] = []
    for block in blocks(path):
        if block.is_shell:
            found += [(block.where, c) for c in block.commands() if "snakemake " in c]
    prose = _FENCED_TEXT.sub("", path.read_text())
    for span in re.findall(r"`(snakemake [^`]+)`", prose):
        found.append((f"{path.relative_to(REPO)} (inline)", span))
    return found


_FENCED_TEXT = re.compile(r"^\s*```.*?^\s*```", re.M | re.S)


def words_after_configfile(command: str) -> list[str]:
    """The words Snakemake reads as config files: everything after --configfile up to the
    next option (its argument takes any number of values)."""
    words = shlex.split(command, comments=True)
    taken: list[str] = []
    for i, word in enumerate(words):
        if word.startswith(("--configfile=", "--configfiles=")):
            taken.append(word.split("=", 1)[1])  # one word: it takes that file only
        if word in ("--configfile", "--configfiles"):
            for value in words[i + 1 :]:
                if value.startswith("-"):
                    break
                taken.append(value)
    return taken


def doc_env(root: Path) -> dict[str, str]:
    """The environment documented commands run in: this interpreter's scripts first on PATH
    (`rewardprof`, `snakemake`), HOME a scratch directory under `root`, no XDG_CONFIG_HOME
    (a user's Snakemake profiles must not leak in)."""
    return {
        **{k: v for k, v in os.environ.items() if k != "XDG_CONFIG_HOME"},
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "HOME": str(root / "home"),
    }


def run_documented(command: str, work: Path, env: dict, timeout: float):
    """One documented command, verbatim, in `work`: its CompletedProcess (output captured)."""
    return subprocess.run(
        ["bash", "-c", command], cwd=work, env=env, capture_output=True, text=True, timeout=timeout
    )


# ---- a scratch checkout for running documented commands against the fake engine -----------
RERUN_TARGET = "results/my-sweep/rollouts/3-of-8.parquet"
MATH_ROWS = [json.loads(line) for line in (REPO / "data/examples/math.jsonl").open()]
# task 3 of my-sweep is math row 3 (the first entry, head): it lands in shard 3 of 8
_TASK3_TEXT = json.dumps(MATH_ROWS[3]["responses_create_params"]["input"][-1]["content"])[1:-1]


def is_task3(body: dict) -> bool:
    """Whether a chat request of my-sweep asks about task 3 (its prompt quotes the row)."""
    return _TASK3_TEXT in json.dumps(body.get("messages", []))


def _engine(server: Any) -> dict:
    return {"mode": "endpoint", "base_url": server.base_url, "model": server.model}


_WORKFLOW_FILES = (
    "rules",
    "profiles",
    "config",
    "data",
    "envs",
    "scripts",
    "report",
    "tests/data/nemo_gym",
)


def engine_checkout(root: Path) -> Path:
    """A copy of the checkout's workflow files in root/checkout with its configs as shipped (the
    real engine): `.venv` is this interpreter's environment, `.venv-engine` the checkout's, and
    resources/ is empty, as on a fresh clone before the model is converted."""
    work = root / "checkout"
    for name in _WORKFLOW_FILES:
        shutil.copytree(REPO / name, work / name)
    shutil.copy(REPO / "Snakefile", work / "Snakefile")
    (work / ".venv").symlink_to(Path(sys.prefix))
    (work / ".venv-engine").symlink_to((REPO / ".venv-engine").resolve())
    return work


def scratch_checkout(root: Path, server: Any) -> Path:
    """A copy of the checkout's workflow files in root/checkout, its configs using the fake
    engine `server`: config/config.yaml is the shipped default with `engine` replaced;
    my-blend.yaml and my-sweep.yaml are the manifests the docs name (my-sweep: `run:
    my-sweep`, `num_shards: 8`, math then mcq rows, K = 2); config/examples/replicas.yaml
    balances over the fake engine under two URLs; the NeMo Gym examples use the fake engine;
    .venv is this interpreter's, .venv-nemo-gym the checkout's (when made)."""
    work = root / "checkout"
    for name in _WORKFLOW_FILES:
        shutil.copytree(REPO / name, work / name)
    shutil.copy(REPO / "Snakefile", work / "Snakefile")
    (work / ".venv").symlink_to(Path(sys.prefix))
    if (REPO / ".venv-nemo-gym").exists():
        (work / ".venv-nemo-gym").symlink_to((REPO / ".venv-nemo-gym").resolve())
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
    # N replicas: the fake engine under two URLs (127.0.0.1 and localhost), balanced as two
    replicas = work / "config/examples/replicas.yaml"
    example = yaml.safe_load(replicas.read_text())
    example["engine"] |= _engine(server) | {
        "base_url": [server.base_url, server.base_url.replace("127.0.0.1", "localhost")]
    }
    example["rollout"] = {**example.get("rollout", {}), **quick}
    replicas.write_text(yaml.safe_dump(example, sort_keys=False))
    for name in ("nemo_gym.yaml", "nemo_gym_remote.yaml"):
        path = work / "config/examples" / name
        example = yaml.safe_load(path.read_text())
        example["engine"] = _engine(server)
        example["rollout"] = {**example.get("rollout", {}), **quick}
        path.write_text(yaml.safe_dump(example, sort_keys=False))
    return work

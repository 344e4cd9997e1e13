"""The fenced commands of README.md and docs/: every ```bash block is a list of commands a
user types. The tests run each one verbatim (tests/workflow/test_doc_commands.py) unless the
block is marked, on the line before its fence, as one that cannot run on a test machine:

    <!-- not run in tests: slurm -->

with one of the REASONS below. Every fence names its language: `bash` for commands, `text`
for output, `yaml`, `python`, ... so that no command hides in an unlabeled block.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL = ("bash", "sh", "shell", "console")
# why a block cannot run on the test machine
REASONS = {
    "slurm": "needs a Slurm cluster and the shipped profile's job sizes",
    "gpu": "needs a GPU machine",
    "install": "installs packages (network, minutes)",
    "engine": "needs the real vLLM engine (.venv-engine) and minutes of CPU",
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
        if word in ("--configfile", "--configfiles"):
            for value in words[i + 1 :]:
                if value.startswith("-"):
                    break
                taken.append(value)
    return taken

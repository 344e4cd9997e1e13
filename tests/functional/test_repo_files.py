"""No file of the repository (as git lists it, so this starts `git`) names a file outside the
repository or an issue of a tracker. The other checks of what the repository says about itself
are in process: tests/unit/test_repo_hygiene.py."""

from __future__ import annotations

import re
import subprocess

from harness.doc_commands import REPO


def _repo_text_files() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    return [name for name in listed if name and (REPO / name).is_file()]


# spelled in pieces so that this file does not match itself
_OUTSIDE = re.compile(
    "|".join(
        [
            r"\b" + "FACTS" + r"\.md\b",
            r"\b" + "DESIGN" + r"\.md\b",
            r"\.\./" + "shared/",
            "/" + "work/",
        ]
    )
)
_ISSUE = re.compile(r"\b" + "issues?" + r"\s*#?\s*\d+\b|\bPR\s*#\d+", re.I)


def test_no_file_names_a_file_outside_the_repository_or_an_issue_number():
    problems: list[str] = []
    files = _repo_text_files()
    for name in files:
        try:
            text = (REPO / name).read_text()
        except UnicodeDecodeError:
            continue  # images, Parquet fixtures
        for lineno, line in enumerate(text.splitlines(), 1):
            for pattern in (_OUTSIDE, _ISSUE):
                m = pattern.search(line)
                if m:
                    problems.append(f"{name}:{lineno}: {m.group(0)!r}")
    assert len(files) > 100  # the listing saw the repository
    assert problems == []

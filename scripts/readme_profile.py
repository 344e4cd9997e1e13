"""Write the README's sample profile from a finished run: the per-label table the profile job
printed at the end of that run (`results/<run>/profile/summary.json`), with the run's date.

    python scripts/readme_profile.py [results/demo]

The table sits between the README's `<!-- profile table -->` marker and the end of the fenced
block after it; tests/unit/test_readme_profile.py checks that its columns are the ones the
profile prints, so a new column fails the test until this script is run on a real run again.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime
from pathlib import Path

from rewardprof.stages.profile_summary import format_table

REPO = Path(__file__).resolve().parents[1]
MARKER = "<!-- profile table -->"
BLOCK = re.compile(re.escape(MARKER) + r"\n(.*?)\n```text\n(.*?)\n```", re.S)


def render(run_dir: Path) -> tuple[str, str]:
    summary_path = run_dir / "profile" / "summary.json"
    summary = json.loads(summary_path.read_text())
    day = datetime.fromtimestamp(summary_path.stat().st_mtime, UTC).strftime("%Y-%m-%d")
    caption = (
        f"The default run's profile (real vLLM CPU + SmolLM2-135M, {day}; written by "
        f"`python scripts/readme_profile.py {run_dir}` from that run):"
    )
    return caption, format_table(summary["labels"])


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0] if argv else "results/demo")
    readme = REPO / "README.md"
    text = readme.read_text()
    if not BLOCK.search(text):
        sys.exit(f"{readme}: no {MARKER} block followed by a ```text block")
    caption, table = render(run_dir)
    readme.write_text(BLOCK.sub(lambda m: f"{MARKER}\n{caption}\n\n```text\n{table}\n```", text))
    print(f"{readme}: profile table from {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

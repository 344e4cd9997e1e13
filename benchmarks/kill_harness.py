"""Kill-safety benchmark: many randomized SIGKILL trials of the rollout stage (see
tests/harness/kill_harness.py for what one trial does and checks). Result in docs/benchmarks.md.

    .venv/bin/python benchmarks/kill_harness.py --trials 200            # fork mode (fast)
    .venv/bin/python benchmarks/kill_harness.py --trials 30 --mode cli  # the real CLI
"""

import sys
from pathlib import Path

# the harness is test code: it lives under tests/, not in the installed package
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from harness.kill_harness import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())

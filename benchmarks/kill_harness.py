"""Kill-safety benchmark: many randomized SIGKILL trials of the rollout stage (see
rewardprof.testing.kill_harness for what one trial does and checks). Result in docs/benchmarks.md.

    .venv/bin/python benchmarks/kill_harness.py --trials 200            # fork mode (fast)
    .venv/bin/python benchmarks/kill_harness.py --trials 30 --mode cli  # the real CLI
"""

import sys

from rewardprof.testing.kill_harness import main

if __name__ == "__main__":
    sys.exit(main())

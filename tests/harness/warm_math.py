"""Imported by the kill harness's forkserver preload: loads and warms math-verify (SymPy, the
LaTeX grammar) once, so every attempt forked from the server verifies without the ~1 s cold
start. Importing this module runs one comparison; nothing else."""

from rewardprof.environments.math import math_equal

if not math_equal("2", "2", 5):
    raise RuntimeError("math-verify does not verify 2 == 2: the environment is broken")

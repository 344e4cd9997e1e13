"""Each attempt of a rollout job keeps its logs (core/attempt_log.py): a process whose stderr is
appended to a log file (the rule's `2>>`) moves it to attempts/<name> and leaves a link; the
log deleted between attempts, as Snakemake deletes a job's logs before running it again, loses
nothing. The engine's log likewise."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from rewardprof.core import attempt_log
print("before the move", file=sys.stderr, flush=True)
attempt_log.keep_stderr_log()
attempt_log.keep_engine_log(sys.argv[2])
print(f"attempt {sys.argv[1]}", file=sys.stderr, flush=True)
with open(sys.argv[2], "a") as engine:
    engine.write(f"engine of attempt {sys.argv[1]}\\n")
"""


def test_logs_deleted_between_attempts_keep_every_attempt(tmp_path):
    log, engine = tmp_path / "logs/rollout/0-of-2.log", tmp_path / "logs/engine/0-of-2.log"
    log.parent.mkdir(parents=True)
    engine.parent.mkdir(parents=True)
    for attempt in (1, 2):
        for path in (log, engine):  # what Snakemake does before it runs the job again
            path.unlink(missing_ok=True)
        with log.open("ab") as err:
            subprocess.run(
                [sys.executable, "-c", SCRIPT, str(attempt), str(engine)], stderr=err, check=True
            )
    for path in (log, engine):
        assert path.is_symlink() and path.resolve() == path.parent / "attempts" / path.name
    assert log.read_text().splitlines() == [
        "before the move",
        "attempt 1",
        "before the move",
        "attempt 2",
    ]
    assert engine.read_text() == "engine of attempt 1\nengine of attempt 2\n"


def test_stderr_that_is_not_a_file_is_left_alone(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, "1", str(tmp_path / "engine.log")],
        capture_output=True,
        text=True,
        check=True,
    )
    # a pipe (a terminal, a test) keeps getting every line; only the engine's log moved
    assert out.stderr.splitlines() == ["before the move", "attempt 1"]
    assert (tmp_path / "engine.log").is_symlink()

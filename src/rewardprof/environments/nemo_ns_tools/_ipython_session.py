# ruff: noqa: S102
"""ns_tools' stateful Python tool, run in the sandbox once per call (nemo_ns_tools).

The environment (this package's __init__.py) runs this file's text with `python -I` in the
sandbox (importing it runs nothing). It reads its request from stdin: {"cells": earlier code to
run again, "code": this call's, "timeout_s", "grace_s", "packages", "max_chars"}; writes "ready"
once IPython is up and "cell" before this call's code; and one JSON line last on stdout:
{"stdout", "stderr", "status", "cut"}: status completed | error | interrupted, cut whether each
stream went past max_chars (the rest was not kept).

The interpreter is NeMo Skills' sandbox's (the one NeMo Gym's ns_tools server calls): an IPython
shell with plain tracebacks, the value of a last expression displayed as `Out[n]: ...` (pretty
printed), stdout and stderr captured. Past `timeout_s` the cell gets a KeyboardInterrupt (as
NeMo Skills sends SIGINT); a cell still running `grace_s` later is killed from a C thread that
needs no interpreter lock (faulthandler), which writes "Timeout (" on fd 1: the caller answers
that call as timed out and the interpreter state is lost, as when NeMo Skills kills a shell.
"""

import contextlib
import faulthandler
import json
import os
import signal
import sys


class _CappedText:
    """A text sink keeping the first `limit` characters and counting the rest: a cell printing
    without end costs no memory past the cap (the tool's answer is cut there anyway)."""

    def __init__(self, limit):
        self.limit, self.parts, self.kept, self.dropped = limit, [], 0, 0

    def write(self, text):
        room = self.limit - self.kept
        if room > 0:
            self.parts.append(text[:room])
            self.kept += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def flush(self):
        return None

    def getvalue(self):
        return "".join(self.parts)


def _shell():
    os.environ["IPYTHONDIR"] = os.path.join(os.environ.get("HOME", "."), ".ipython")
    from IPython.terminal.interactiveshell import TerminalInteractiveShell  # lazy: IPYTHONDIR
    from traitlets.config import Config  # lazy: IPython's own configuration library

    config = Config()
    config.HistoryManager.enabled = False  # no sqlite file in the sandbox's scratch
    shell = TerminalInteractiveShell(config=config)
    shell.InteractiveTB.set_mode(mode="Plain")
    return shell


def run_cell(shell, code, timeout_s, grace_s, max_chars):
    """One cell: (stdout, stderr, status, which stream was cut); a cell still running
    timeout_s + grace_s after its start ends the process."""
    # capped a little past the tool's cut so the caller still sees that it was cut
    out, err = _CappedText(max_chars + 64), _CappedText(max_chars + 64)
    result = None
    # C's own handler: a KeyboardInterrupt as from NeMo Skills' SIGINT, no frame of ours in
    # the traceback the model reads
    signal.signal(signal.SIGALRM, signal.default_int_handler)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    faulthandler.dump_traceback_later(timeout_s + grace_s, exit=True, file=sys.__stdout__)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            result = shell.run_cell(code)
    except KeyboardInterrupt:  # the alarm rang as the cell ended, outside IPython's catch
        result = None  # the cell ran to its end
    finally:
        fired = signal.setitimer(signal.ITIMER_REAL, 0)[0] == 0
        faulthandler.cancel_dump_traceback_later()
    ok = result is None or result.success
    status = "interrupted" if fired and not ok else ("completed" if ok else "error")
    return out.getvalue(), err.getvalue(), status, [out.dropped > 0, err.dropped > 0]


def main():
    request = json.loads(sys.stdin.read())
    sys.path.extend(request["packages"])
    shell = _shell()
    sys.__stdout__.write("ready\n")
    sys.__stdout__.flush()
    args = (request["timeout_s"], request["grace_s"], request["max_chars"])
    for earlier in request["cells"]:  # their output was given when they first ran
        run_cell(shell, earlier, *args)
    sys.__stdout__.write("cell\n")
    sys.__stdout__.flush()
    stdout, stderr, status, cut = run_cell(shell, request["code"], *args)
    answer = {"stdout": stdout, "stderr": stderr, "status": status, "cut": cut}
    sys.__stdout__.write("\n" + json.dumps(answer) + "\n")
    sys.__stdout__.flush()


if __name__ == "__main__":
    main()

"""The wire between a program and its grader: one JSON object per line on a pair of pipes.

Stdlib only and self-contained: the harness imports it; its text, then _values.py's, is
also prepended to the scripts that speak it in other processes (`_runner.py` in the
sandbox, the program's side; `_remote.py` + `_judge.py`, the grader's side for test
code of any shape). What a value looks like on it is _values.py's. The receiving side
enforces the declared size cap of a message while it reads, never after.
"""

import json
import os
import select
import time


class WireViolation(Exception):
    """A message that breaks the wire's rules: malformed, oversized or out of place."""

    def __init__(self, what, detail=""):
        super().__init__(f"{what}: {detail}" if detail else what)
        self.what = what


class ChannelClosed(Exception):
    """The other side is gone (end of file) or did not answer before the deadline."""

    def __init__(self, what):
        super().__init__(what)
        self.what = what  # "eof" or "timeout"


class Channel:
    """One side of a pair of pipes carrying one JSON object per line, each at most `cap`
    bytes: a longer line is refused while it is read (WireViolation "oversized")."""

    def __init__(self, read_fd, write_fd, cap):
        self.read_fd, self.write_fd, self.cap = read_fd, write_fd, cap
        self._buffer = b""

    def receive(self, deadline):
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic() if deadline is not None else None
            if left is not None and (
                left <= 0 or not select.select([self.read_fd], [], [], left)[0]
            ):
                raise ChannelClosed("timeout")
            chunk = os.read(self.read_fd, 1 << 16)
            if not chunk:
                raise ChannelClosed("eof")
            self._buffer += chunk
            if len(self._buffer.split(b"\n", 1)[0]) > self.cap:
                raise WireViolation("oversized", f"a message above {self.cap} bytes")
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):
            raise WireViolation("malformed", "not JSON") from None
        if type(message) is not dict:
            raise WireViolation("malformed", "not a JSON object")
        return message

    def send(self, message, deadline):
        data = (json.dumps(message) + "\n").encode("utf-8", "backslashreplace")
        while data:
            left = deadline - time.monotonic() if deadline is not None else None
            if left is not None and (
                left <= 0 or not select.select([], [self.write_fd], [], left)[1]
            ):
                raise ChannelClosed("timeout")
            try:
                data = data[os.write(self.write_fd, data) :]
            except BrokenPipeError:
                raise ChannelClosed("eof") from None

"""The `rewardprof` a test's Snakemake run finds first on its PATH (harness/stage_server.py): it
hands its command line, working directory, environment, umask and its stdin, stdout and stderr
to the stage server, which runs the command in a process forked from one that imported
rewardprof once, and it ends as that process ended (its exit code, or killed by its signal).
A signal sent to it goes on to the command's process; killed itself (SIGKILL), the server kills
the command. No server (or one that does not answer): it runs the real `rewardprof` instead.

Started with `python -S -E`, it imports only the standard library: ~0.02 s, against ~0.5-1.5 s
of imports for a stage command started as a new interpreter."""

import json
import os
import signal
import socket
import struct
import sys

REAL = sys.argv.pop(1)  # the real console script, put here by the launcher's line
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)


def _connect() -> socket.socket | None:
    path = os.environ.get("REWARDPROF_STAGE_SERVER")
    if not path:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError:
        conn.close()
        return None
    return conn


def _lines(conn: socket.socket):
    buffered = b""
    while True:
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            yield json.loads(line)
        chunk = conn.recv(4096)
        if not chunk:
            return
        buffered += chunk


def main() -> None:
    conn = _connect()
    if conn is None:
        os.execv(REAL, [REAL, *sys.argv[1:]])
    umask = os.umask(0)
    os.umask(umask)
    body = json.dumps(
        {"argv": [REAL, *sys.argv[1:]], "cwd": os.getcwd(), "env": dict(os.environ), "umask": umask}
    ).encode()
    socket.send_fds(conn, [struct.pack("!I", len(body))], [0, 1, 2])
    conn.sendall(body)
    replies = _lines(conn)
    pid = next(replies, {}).get("pid")
    for sig in FORWARDED if pid else ():
        signal.signal(sig, lambda number, _frame: os.kill(pid, number))
    status = next(replies, {}).get("status") if pid else None
    if status is None:
        sys.exit(f"rewardprof (test stage server): no exit status for {sys.argv[1:2]}")
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status))


main()

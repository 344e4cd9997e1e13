"""One engine replica as its own process (SIGKILL-able): the fake server answering with the
test policy (harness/shardkit.answer: quotes the question and its seed, wrong when seed % 3 ==
0), optionally holding every answer after the first M at its gate.

    python tests/harness/replica_server.py --port P [--hold-after M --held-file F]

F is created once a request waits at the gate: the test SIGKILLs the replica then, so the
kill lands while it holds requests, by construction."""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `harness` when run as a script

from harness.shardkit import MODEL, answer  # noqa: E402
from rewardprof.testing.fake_server import FakeOpenAI  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--hold-after", type=int)
    p.add_argument("--held-file", type=Path)
    args = p.parse_args()
    server = FakeOpenAI(answer, model=MODEL, port=args.port).start()
    if args.hold_after is not None:
        server.hold_after(args.hold_after)
    print(f"serving {server.base_url}", flush=True)
    while args.held_file is not None and server.gate_held < 1:
        time.sleep(0.02)
    if args.held_file is not None:
        # written whole, then renamed: the test kills this process the moment the file exists,
        # so a file created empty and filled afterwards could be read empty
        partial = args.held_file.with_name(args.held_file.name + ".partial")
        partial.write_text(str(server.gate_held))
        partial.rename(args.held_file)
    threading.Event().wait()


if __name__ == "__main__":
    main()

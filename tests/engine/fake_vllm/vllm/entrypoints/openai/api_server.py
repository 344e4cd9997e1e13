"""A stand-in for `python -m vllm.entrypoints.openai.api_server` (lifecycle tests only).

Speaks just enough of the server for serve mode's lifecycle: binds --host/--port like vLLM (no
SO_REUSEPORT, so a taken port fails with 'Address already in use'), answers /health and
/v1/models with every --served-model-name, and starts a child process like vLLM's engine core.
FAKE_VLLM_BEHAVIOUR picks a failure: `crash_at_start`, `die_when:<path>` (the engine core "dies"
once <path> exists: the test creates it when its run has started, so the death lands during
the run by construction, whatever the machine's speed), `ignore_sigterm`, `never_ready`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--served-model-name", nargs="+", default=[])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    args, _ = ap.parse_known_args()
    behaviour = os.environ.get("FAKE_VLLM_BEHAVIOUR", "")
    print(f"INFO fake vLLM starting, model {args.model}, behaviour {behaviour!r}", flush=True)
    if behaviour == "crash_at_start":
        print("ERROR fake vLLM: CUDA out of memory (pretend)", flush=True)
        sys.exit(3)
    if behaviour == "ignore_sigterm":
        signal.signal(signal.SIGTERM, lambda *a: print("INFO ignoring SIGTERM", flush=True))
    # an "engine core" child, as vLLM has; it must not outlive the server
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    names = args.served_model_name or [args.model]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if behaviour == "never_ready":
                self.send_response(503)
                self.end_headers()
                return
            if self.path == "/health":
                body = b""
            elif self.path == "/v1/models":
                body = json.dumps(
                    {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
                ).encode()
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    HTTPServer.allow_reuse_address = True
    try:
        server = HTTPServer((args.host, args.port), Handler)
    except OSError as exc:
        print(f"ERROR fake vLLM: {exc!r}", flush=True)  # [Errno 98] Address already in use
        sys.exit(1)
    print(f"INFO Starting vLLM server on http://{args.host}:{args.port}", flush=True)
    if behaviour.startswith("die_when:"):
        trigger = behaviour.split(":", 1)[1]

        def die() -> None:
            while not os.path.exists(trigger):
                time.sleep(0.05)
            print("ERROR fake vLLM: engine core died unexpectedly (pretend)", flush=True)
            os._exit(7)

        threading.Thread(target=die, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()

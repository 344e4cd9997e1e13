"""grpo-step --serve reads the engine's prompt_logprobs (train/refit.py): the completion tokens'
log probabilities, picked by token id from each position; a reply over the bound is refused
while it is read, not parsed whole."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from rewardprof.train import refit
from rewardprof.train.from_run import TrainError


def _serve(body: bytes):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}/v1"


def test_completion_logprobs_by_token_id_and_a_reply_over_the_bound(monkeypatch):
    positions = [None, {"7": {"logprob": -0.1}}, {"8": {"logprob": -1.5}, "9": {"logprob": -0.2}}]
    body = json.dumps({"choices": [{"prompt_logprobs": positions}]}).encode()
    server, url = _serve(body)
    try:
        assert refit._prompt_logprobs(url, "m", [5, 7], [8]) == [-1.5]
        monkeypatch.setattr(refit, "MAX_REPLY_BYTES", len(body) - 1)
        with pytest.raises(TrainError, match="reply over"):
            refit._prompt_logprobs(url, "m", [5, 7], [8])
    finally:
        server.shutdown()

"""Each attempt of a rollout job keeps its log: the rules append the job's stderr to the shard's
log, and the command starts each attempt's part with one header line."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from rewardprof.cli import ATTEMPTS_APPENDED, main

REPO = Path(__file__).resolve().parents[2]


def test_rollout_rules_append_to_their_logs():
    for smk in ("rollout.smk", "adaptive.smk"):
        shell = (REPO / "rules" / smk).read_text()
        assert "2>> {log.rollout:q}" in shell and "2> {log.rollout" not in shell, smk


def test_each_attempt_starts_with_a_header_line(tmp_path, capsys):
    logging.getLogger().handlers.clear()  # main() configures logging for its own stderr
    assert "rollout" in ATTEMPTS_APPENDED
    args = ["rollout", "--config", str(tmp_path / "missing.json"), "--tasks", "t", "--journal"]
    for _attempt in range(2):
        logging.getLogger().handlers.clear()
        out = ["--out", str(tmp_path / "0-of-1.parquet"), "--shard", "0", "--num-shards", "1"]
        assert main([*args, str(tmp_path / "j"), *out]) != 0
    err = capsys.readouterr().err
    headers = re.findall(r"===== rollout attempt started on \S+ \(pid \d+\) =====", err)
    assert len(headers) == 2
    assert err.count("config file not found") == 2  # each attempt's own error, after its header

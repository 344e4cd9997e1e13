"""The bad-input catalogue (tests/harness/bad_input.py) through the real Snakefile, one case per
kind of check. Each case must fail with one line naming the key or file:line (no traceback) and
leave no output behind (logs are allowed: they hold that line; so are the config files of
results/<run>/config/, what the run was given)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.bad_input import CASES, GOOD, line
from harness.bad_input import entries as default_entries
from helpers import endpoint_config, snakemake, write_config

from rewardprof.testing.fake_server import FakeOpenAI

pytestmark = pytest.mark.workflow

# The Snakefile's wiring of each kind of check, one case each: the sources before the DAG, a
# bad row through the materialize job, the endpoint preflight at onstart (a server answering
# another model); its own validation (a misspelled key) is test_workflow.py's
# test_misspelled_key_fails_before_any_job. Every case of the catalogue is checked in process:
# tests/unit/test_bad_input_in_process.py.
WIRING = [
    "missing_source",
    "truncated_json_line",
    "endpoint_serves_another_model",
]


def _outputs_left(workdir: Path) -> list[str]:
    """Files under results/ other than logs (which carry the error line) and the config files
    the stages read (results/<run>/config/: what the run was given, written first)."""
    results = workdir / "results"
    if not results.exists():
        return []
    return sorted(
        str(p.relative_to(results))
        for p in results.rglob("*")
        if p.is_file() and not {"logs", "config"} & set(p.relative_to(results).parts)
    )


@pytest.mark.parametrize("case", WIRING)
def test_bad_input_fails_with_one_clear_line(tmp_path, case):
    changes, data, expected = CASES[case]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "m.jsonl").write_bytes(line(GOOD) if data is None else data)
    with FakeOpenAI() as server:
        changes = dict(changes)
        entries = changes.pop("entries", default_entries())
        cfg = endpoint_config(server.base_url, entries, **{"num_shards": 1, **changes})
        expected = expected.replace("{url}", server.base_url)
        r = snakemake(tmp_path, "--configfile", str(write_config(tmp_path, cfg)))
        assert server.stats["requests"] == 0  # failed before any rollout was asked for
    output = r.stdout + r.stderr
    assert r.returncode != 0
    assert expected in output, output[-3000:]
    # one clear line: the message is on one line and no traceback reaches the user
    assert any(expected in text for text in output.splitlines())
    assert "Traceback" not in output, output[-3000:]
    assert _outputs_left(tmp_path) == []
    assert not list(tmp_path.rglob(".*.tmp*"))

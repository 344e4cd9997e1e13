"""The bad-input catalogue (tests/harness/bad_input.py), in process: each case's config goes
through the checks the Snakefile runs, called as it calls them (the same YAML round trip, then
validate_config and the written-password check, check_sources, the endpoint preflight, the
materialize stage), and must fail with its one line, leaving no output and no temp file. The
real Snakefile runs a few of these cases too (tests/workflow/test_bad_input.py): the wiring."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from harness.bad_input import CASES, GOOD, closed_port, entries, line
from helpers import endpoint_config, require_piece

from rewardprof.core.errors import RewardprofError
from rewardprof.core.overrides import typed_overrides
from rewardprof.core.redaction import refuse_written_passwords
from rewardprof.engine.preflight import endpoint_problem
from rewardprof.environments.instruction_following.checks import PUNKT, nltk_installed
from rewardprof.manifest.load import validate_config
from rewardprof.sources.checks import check_sources
from rewardprof.stages import MaterializePaths, materialize

# the one case that needs a server answering (another model served): Snakemake case only
NEEDS_A_SERVER = {"endpoint_serves_another_model"}


def _snakefile_checks(raw: dict, workdir: Path, preflight: bool) -> None:
    """What the Snakefile does before and at the first job, in its order (rules/common.smk,
    rules/checks.smk and its onstart, rules/materialize.smk). `preflight`: the onstart check of
    the endpoint; the other cases skip it, as no server answers here (the Snakemake cases have
    one: tests/workflow/test_bad_input.py)."""
    cfg = validate_config(typed_overrides(raw, {}), origin="config")
    refuse_written_passwords(raw, origin="config")
    check_sources(cfg, base_dir=workdir)
    problem = endpoint_problem(cfg) if preflight else None
    if problem:
        raise RewardprofError(f"rewardprof: {problem}")  # as onstart prints it
    out = workdir / "results" / cfg.run / "materialize"
    paths = MaterializePaths(
        tasks=out / "tasks.parquet", report=out / "report.json", base_dir=workdir
    )
    materialize.run(cfg, paths)


def _without_the_tagger(tmp_path: Path, monkeypatch, request) -> None:
    """NLTK data with punkt_tab and stopwords (the ones installed here) and no POS tagger
    (nltk_installed caches its answers: forgotten before and after)."""
    require_piece("NLTK's punkt_tab", nltk_installed(PUNKT), "run `rewardprof install-nltk-data`")
    import nltk

    data = tmp_path / "nltk_data_without_tagger"
    for resource in ("tokenizers/punkt_tab", "corpora/stopwords"):
        (data / resource).parent.mkdir(parents=True, exist_ok=True)
        (data / resource).symlink_to(nltk.data.find(resource).path)
    monkeypatch.setattr(nltk.data, "path", [str(data)])
    nltk_installed.cache_clear()
    request.addfinalizer(nltk_installed.cache_clear)


@pytest.mark.parametrize("case", sorted(set(CASES) - NEEDS_A_SERVER))
def test_bad_input_fails_with_one_clear_line(tmp_path, monkeypatch, request, case):
    changes, data, expected = CASES[case]
    monkeypatch.delenv("REWARDPROF_NO_PREFLIGHT", raising=False)
    monkeypatch.setenv("REWARDPROF_TEST_UNSET_KEY", "")
    if case == "nltk_data_missing":
        _without_the_tagger(tmp_path, monkeypatch, request)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "m.jsonl").write_bytes(line(GOOD) if data is None else data)
    (tmp_path / "data" / "dir.jsonl").mkdir()  # a directory named like a source
    # an endpoint that is not contacted (every case fails before a request); endpoint_down's
    # is a closed port
    base_url = f"http://127.0.0.1:{closed_port()}/v1"
    if case == "endpoint_down":
        changes = json.loads(json.dumps(changes).replace("{port}", base_url.split(":")[2][:-3]))
    changes = dict(changes)  # a copy, never a JSON round trip: the bomb would expand
    preflight = "engine" in changes  # the cases about the endpoint
    cfg = endpoint_config(
        base_url, changes.pop("entries", entries()), **{"num_shards": 1, **changes}
    )
    expected = expected.replace("{port}", cfg["engine"]["base_url"].split(":")[-1].split("/")[0])
    # as Snakemake reads it: the YAML file the test writes (anchors and aliases for the bomb)
    raw = yaml.safe_load(yaml.safe_dump(cfg))
    with pytest.raises(RewardprofError) as info:
        _snakefile_checks(raw, tmp_path, preflight)
    message = str(info.value)
    assert any(expected in text for text in message.splitlines())  # on one line
    if case != "many_bad_rows_collected":  # that one lists the first bad rows, one a line
        assert "\n" not in message
    results = tmp_path / "results"
    assert not results.exists() or [p for p in results.rglob("*") if p.is_file()] == []
    assert not list(tmp_path.rglob(".*.tmp*"))

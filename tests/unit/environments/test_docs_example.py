"""The add-an-environment walkthrough (docs/environments.md) is itself tested.

Its example module (docs/examples/exact_match.py) is registered the way a third-party package
does it, through the `rewardprof.environments` entry-point group (a dist-info directory on
sys.path, exactly what `pip install` writes), then run on its checked-in two-row fixture.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from harness.env_helpers import run

from rewardprof import environments
from rewardprof.core.config import ConfigError
from rewardprof.manifest.load import validate_config

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "docs" / "examples"


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    dist = tmp_path / "rewardprof_exact_match-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rewardprof-exact-match\nVersion: 0.1\n"
    )
    (dist / "entry_points.txt").write_text(
        "[rewardprof.environments]\nexact_match = exact_match:ExactMatchEnvironment\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    environments._plugins.cache_clear()
    yield
    environments._plugins.cache_clear()
    sys.modules.pop("exact_match", None)


def test_example_environment_through_the_entry_point(installed_plugin, ctx):
    assert "exact_match" in environments.known_environments()
    assert "exact_match" not in environments.BUILTIN
    # a manifest may name it like any built-in
    cfg = validate_config(
        {"entries": [{"label": "em", "environment": "exact_match", "source": "x.jsonl"}]}
    )
    assert cfg.entries[0].environment == "exact_match"
    # ... and its Options model checks the entry's options with the config
    entry = {"label": "em", "environment": "exact_match", "source": "x.jsonl"}
    with pytest.raises(ConfigError, match=r"options\.case_sensitiv: unknown key; did you mean"):
        validate_config({"entries": [dict(entry, options={"case_sensitiv": True})]})
    env = environments.make_environment("exact_match")
    cases = [json.loads(line) for line in (EXAMPLES / "exact_match.jsonl").open()]
    rewards = []
    for case in cases:
        env.check_row(case["row"])
        assert env.prompt(case["row"])[0]["role"] == "user"
        verdict = run(env.verify(case["row"], case["completion"], ctx))
        assert verdict.status == case["expected"]["status"]
        rewards.append(verdict.reward)
    assert rewards == [c["expected"]["reward"] for c in cases] == [1.0, 0.0]
    strict = environments.make_environment("exact_match", {"case_sensitive": True})
    assert run(strict.verify(cases[0]["row"], cases[0]["completion"], ctx)).reward == 0.0


def test_walkthrough_shows_the_tested_code():
    doc = (REPO / "docs" / "environments.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", doc, re.S)
    module = (EXAMPLES / "exact_match.py").read_text()
    assert module in blocks, "docs/environments.md must show docs/examples/exact_match.py verbatim"


def test_every_builtin_is_documented():
    doc = (REPO / "docs" / "environments.md").read_text()
    for name in environments.BUILTIN:
        assert f"### `{name}`" in doc, name

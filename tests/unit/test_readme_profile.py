"""The README's sample profile is the table the profile job prints (scripts/readme_profile.py
writes it from a real run): its columns are the printed ones, its rows the default config's
entries. A column added to the table fails here until the README is regenerated."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import yaml

from rewardprof.stages.profile_summary import TABLE_COLUMNS

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location(
        "readme_profile", REPO / "scripts" / "readme_profile.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_profile_has_the_printed_columns_and_the_default_entries():
    match = _script().BLOCK.search((REPO / "README.md").read_text())
    assert match, "README.md: the profile table block (scripts/readme_profile.py) is missing"
    caption, table = match.group(1), match.group(2).splitlines()
    assert "scripts/readme_profile.py" in caption
    assert table[0].split() == TABLE_COLUMNS, "run scripts/readme_profile.py on a real run"
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    rows = [line.split()[0] for line in table[1:] if not set(line) <= {"-", " "}]
    assert rows == [e["label"] for e in default["entries"]]


def test_the_script_renders_a_run_as_the_profile_prints_it(tmp_path):
    import json

    labels = [{c: (0.5 if c.startswith(("mean", "share")) else 1) for c in TABLE_COLUMNS}]
    labels[0].update(label="m", environment="math")
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "summary.json").write_text(json.dumps({"labels": labels}))
    caption, table = _script().render(tmp_path)
    assert table.splitlines()[0].split() == TABLE_COLUMNS
    assert table.splitlines()[2].split()[:2] == ["m", "math"]

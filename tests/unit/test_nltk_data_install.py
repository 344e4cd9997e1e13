"""`rewardprof install-nltk-data` unpacks punkt_tab and stopwords from a llama-index-core wheel
into an NLTK data directory (here a wheel of the same layout, built in the test)."""

from __future__ import annotations

import zipfile

import pytest

from rewardprof import cli
from rewardprof.tools import nltk_data

PREFIX = "llama_index/core/_static/nltk_cache/"


def _wheel(path, english_stopwords: str):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(PREFIX + "tokenizers/punkt_tab/english/abbrev_types.txt", "dr\nmr\n")
        zf.writestr(PREFIX + "tokenizers/punkt_tab.zip", b"not unpacked")
        zf.writestr(PREFIX + "corpora/stopwords/english", english_stopwords)
        zf.writestr("llama_index/core/__init__.py", "")
    return path


def test_unpacks_both_resources_in_nltks_layout(tmp_path, capsys):
    wheel = _wheel(tmp_path / "llama_index_core-0-py3-none-any.whl", "a\nthe\n")
    target = tmp_path / "nltk_data"
    assert cli.main(["install-nltk-data", "--dir", str(target), "--wheel", str(wheel)]) == 0
    assert (target / "tokenizers/punkt_tab/english/abbrev_types.txt").read_text() == "dr\nmr\n"
    assert (target / "corpora/stopwords/english").read_text() == "a\nthe\n"
    assert not (target / "tokenizers/punkt_tab.zip").exists()
    out = capsys.readouterr().out
    assert "punkt_tab -> " in out and "stopwords -> " in out


def test_a_second_install_replaces_the_resource_whole(tmp_path):
    target = tmp_path / "nltk_data"
    stale = target / "corpora/stopwords/stale"
    stale.parent.mkdir(parents=True)
    stale.write_text("left from an older copy")
    nltk_data.unpack(_wheel(tmp_path / "w.whl", "an\n"), target)
    assert not stale.exists()
    assert (target / "corpora/stopwords/english").read_text() == "an\n"
    assert sorted(p.name for p in target.iterdir()) == ["corpora", "tokenizers"]  # no temp left


def test_a_wheel_without_the_data_is_refused(tmp_path):
    wheel = tmp_path / "empty.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("llama_index/core/__init__.py", "")
    with pytest.raises(FileNotFoundError, match="tokenizers/punkt_tab/"):
        nltk_data.unpack(wheel, tmp_path / "d")

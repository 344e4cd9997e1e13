"""The engine commands the docs show (even those the doc test cannot run without the real
engine) name the model directory the workflow's model rule writes: a `--model` or `--out`
under resources/models/ that is not a converted builtin's directory fails verbatim
(HFValidationError, both servers of the replicas loop die)."""

from __future__ import annotations

import re
import shlex

from harness.doc_commands import blocks, doc_files

from rewardprof.engine.model import BUILTIN_MODELS, model_key

CONVERTED = {f"resources/models/{model_key(name)}" for name in BUILTIN_MODELS}


def _model_paths(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    return [
        value
        for flag, value in zip(words, words[1:], strict=False)
        if flag in ("--model", "--out") and value.startswith("resources/models/")
    ]


def test_documented_engine_commands_name_the_converted_model():
    seen = []
    for path in doc_files():
        for block in blocks(path):
            if not block.is_shell:
                continue
            for command in block.commands():
                for value in _model_paths(command):
                    seen.append(value)
                    assert value in CONVERTED, (
                        f"{block.where}: {value} is not the converted model's directory "
                        f"(one of {sorted(CONVERTED)})"
                    )
    # the replicas loop, the single server and the conversion all name it
    assert len(seen) >= 3, seen


def test_a_stale_model_path_is_caught():
    stale = "vllm serve --model resources/models/smollm2-135m --port 8000"
    assert _model_paths(stale) == ["resources/models/smollm2-135m"]
    assert not set(_model_paths(stale)) & CONVERTED
    assert re.fullmatch(r"resources/models/\S+-c\d+", sorted(CONVERTED)[0])

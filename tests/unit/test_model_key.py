"""The builtin model's directory: named by what determines its bytes, kept once made."""

from __future__ import annotations

import json

from rewardprof.engine.model import MARKER, builtin_dir, builtin_stamp, convert_builtin, model_key
from rewardprof.manifest.load import validate_config

MODEL = "smollm2-135m"


def _cfg(**engine):
    return validate_config(
        {
            "run": "r",
            "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
            "engine": {"mode": "serve", "model": f"builtin:{MODEL}", **engine},
        }
    )


def test_the_model_path_depends_on_the_model_and_converter_not_the_interpreter():
    plain, other = _cfg(), _cfg(python=".venv/bin/python")
    assert builtin_dir(plain, MODEL) == builtin_dir(other, MODEL)
    assert builtin_stamp(plain, MODEL) == builtin_stamp(other, MODEL)
    assert builtin_dir(plain, MODEL).name == model_key(MODEL) != MODEL  # the converter's version


def test_a_converted_model_is_kept_not_converted_again(tmp_path):
    """What the model rule does when its stamp is gone but the directory is whole (another
    run made it): keep it; the interpreter given is never even started."""
    out = tmp_path / model_key(MODEL)
    out.mkdir()
    (out / MARKER).write_text(json.dumps({"source": "made-before", "architecture": "x"}))
    (out / "model.safetensors").write_bytes(b"weights")
    stamp = tmp_path / f"{model_key(MODEL)}.json"
    info = convert_builtin(MODEL, out, python="/nonexistent/python", stamp=stamp)
    assert info["reused"] and info["source"] == "made-before"
    assert (out / "model.safetensors").read_bytes() == b"weights"
    assert json.loads(stamp.read_text())["source"] == "made-before"

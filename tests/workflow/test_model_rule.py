"""The model rule under an engine override: a converted builtin model (its directory and the
stamp beside it) is never converted again, or deleted, because `engine.python` changed; the
dry run of such a config lists no model_convert job."""

from __future__ import annotations

import json
import re

import pytest
from helpers import snakemake, write_config

from rewardprof.engine.model import MARKER, model_key

pytestmark = pytest.mark.workflow
MODEL = "smollm2-135m"


def test_engine_python_override_does_not_retrigger_the_conversion(tmp_path):
    models = tmp_path / "models"
    made = models / model_key(MODEL)
    made.mkdir(parents=True)
    (made / MARKER).write_text(json.dumps({"source": "made-before"}))
    (models / f"{model_key(MODEL)}.json").write_text(json.dumps({"source": "made-before"}))
    (tmp_path / "m.jsonl").write_text(
        json.dumps({"question": "1+1?", "expected_answer": "2"}) + "\n"
    )
    cfg = {
        "run": "other",
        "num_shards": 1,
        "entries": [{"label": "m", "environment": "math", "source": "m.jsonl"}],
        "engine": {"mode": "serve", "model": f"builtin:{MODEL}", "models_dir": str(models)},
    }
    config = write_config(tmp_path, cfg)
    dry = snakemake(
        tmp_path, "-n", "--configfile", str(config), "--config", "engine={python: .venv/bin/python}"
    )
    assert dry.returncode == 0, dry.stdout[-2000:] + dry.stderr[-2000:]
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", dry.stdout.split("Job stats:")[-1], re.M))
    assert jobs.get("rollout") == "1"  # the run's own jobs are planned ...
    assert "model_convert" not in jobs  # ... the shared model's conversion is not
    assert (made / MARKER).is_file()

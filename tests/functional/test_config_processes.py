"""Config checks that need another process: Snakemake's own `--config` parser (importing
snakemake.cli starts the Slurm plugin's probes) and a fresh interpreter that shows what
validation imports and what one command loads. The rest of the config checks are in process
(tests/unit/test_config*.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rewardprof.core.config import ConfigError
from rewardprof.environments import BUILTIN
from rewardprof.manifest.load import validate_config

ENTRY = {"label": "m", "environment": "math", "source": "x.jsonl"}
JUDGE = {"base_url": "http://127.0.0.1:9/v1", "model": "judge"}
MINIMAL = {name: (dict(JUDGE) if name == "llm_judge" else {}) for name in BUILTIN}
MINIMAL["nemo_gym"] = {"base_url": "http://127.0.0.1:9"}  # where its resource server is


def _err(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        validate_config(data)
    return str(info.value)


def test_command_line_sections_are_read_as_yaml():
    """`snakemake --config 'sampling={max_tokens: 512}'`: Snakemake leaves every value inside
    the section a string; they are typed as in a config file, and the strict config takes them."""
    from snakemake.cli import parse_config  # lazy: only this test needs Snakemake's parser

    from rewardprof.core.overrides import typed_overrides

    overrides = parse_config(
        ["sampling={max_tokens: 512, temperature: 0.5}", "num_shards=3", "run=other"]
    )
    assert overrides["sampling"] == {"max_tokens": "512", "temperature": "0.5"}  # the premise
    base = {"entries": [dict(ENTRY, num_repeats="4")], "sampling": {"seed": 7}}
    merged = {**base, **overrides, "sampling": {"seed": 7, **overrides["sampling"]}}
    typed = typed_overrides(merged, overrides)
    assert typed["sampling"] == {"seed": 7, "max_tokens": 512, "temperature": 0.5}
    assert (typed["num_shards"], typed["run"]) == (3, "other")
    # a value from the config file is never converted: "4" stays an error
    assert typed["entries"] == base["entries"]
    assert "entries[0].num_repeats: Input should be a valid integer" in _err(typed)
    cfg = validate_config(dict(typed, entries=[ENTRY]))
    assert (cfg.sampling.max_tokens, cfg.sampling.temperature, cfg.num_shards) == (512, 0.5, 3)


def test_validation_imports_no_verifier_library():
    """The registry is lazy and each Options model cheap: checking a config that names every
    built-in imports none of the verifier libraries (nor the judge's HTTP client)."""
    engine = {"engine": {"tool_call_parser": "hermes"}}  # environments that act need it to serve
    entries = [
        {"label": name, "environment": name, "source": "x.jsonl", "options": MINIMAL[name]}
        for name in BUILTIN
        if name != "llm_judge"  # its module is the judge client's, aiohttp and all
    ]
    code = (
        "import json, sys\n"
        "from rewardprof.manifest.load import validate_config\n"
        f"validate_config(json.loads({json.dumps(json.dumps({'entries': entries, **engine}))}))\n"
        "heavy = ('math_verify', 'sympy', 'reasoning_gym', 'if_verifiable', 'nltk',"
        " 'langdetect', 'aiohttp')\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & set(heavy))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []


def test_a_stage_command_loads_no_other_command_s_tools():
    """Every Snakemake job starts one `rewardprof <stage>`: the command table imports a tool
    (status, check, estimate: pandas and more) only when its command runs (~0.5 s a job)."""
    code = (
        "import sys\n"
        "from rewardprof.cli import build_parser, main\n"
        "build_parser('shard')\n"
        "print(sorted(m for m in sys.modules if m.startswith('rewardprof.tools')))\n"
        "build_parser()\n"  # the whole table (--help of every command) still builds
        "print('rewardprof.tools.status' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["[]", "True"], out.stdout

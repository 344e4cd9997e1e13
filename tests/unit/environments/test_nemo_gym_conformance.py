"""L0: NeMo Gym's public example rows, as they are, under rewardprof's environments of the same
NeMo Gym name (tests/data/nemo_gym/NOTICE.md says where the files come from): every row of
example.jsonl and example_rollouts.jsonl loads (check_row + prompt, as materialize does). That
each recorded response replays to the reward NeMo Gym recorded is L1 (a real worker pool; one
closed form takes math-verify seconds): tests/functional/environments/test_nemo_gym_replay.py.
The instruction environments need NLTK's punkt_tab, stopwords and POS tagger (installed by
`rewardprof install-nltk-data`, as `make test` does); under CI=true their absence fails."""

from __future__ import annotations

import pytest
from harness.nemo_gym_rows import ENVS, OPTIONS, rows, task_row
from helpers import require_piece

from rewardprof.environments import make_environment
from rewardprof.environments.instruction_following.checks import (
    PUNKT,
    STOPWORDS,
    TAGGER,
    nltk_installed,
)


def _needs_nltk_data(env: str) -> None:
    """The instruction environments read NLTK data (skip on a laptop without it, fail in CI)."""
    if env not in ("instruction_following", "ifbench"):
        return
    missing = [r for r in (PUNKT, STOPWORDS, TAGGER) if not nltk_installed(r)]
    require_piece(f"NLTK data {missing}", not missing, "run `rewardprof install-nltk-data`")


LOAD_CASES = [
    (env, name, i)
    for env in ENVS
    for name in ("example.jsonl", "example_rollouts.jsonl")
    for i in range(len(rows(env, name)))
]


@pytest.mark.parametrize(("env", "name", "i"), LOAD_CASES)
def test_every_example_row_loads(env, name, i):
    _needs_nltk_data(env)
    row = task_row(rows(env, name)[i])
    environment = make_environment(env, OPTIONS.get(env))
    environment.check_row(row)
    messages = environment.prompt(row)
    assert messages[-1]["role"] == "user" and messages[-1]["content"]

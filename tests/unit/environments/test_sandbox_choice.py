"""Which sandbox runs: bubblewrap where it works; `auto` falls back to the launcher and says
why; asking for bubblewrap where it cannot run is a verifier_error, never a silent fallback."""

from __future__ import annotations

import json
import os

import pytest
from harness.env_helpers import run

from rewardprof.environments import VerifyContext, make_environment, sandbox
from rewardprof.environments.sandbox import Limits, SandboxError, choose_mechanism, mechanisms

WHY = "bwrap is not installed (Debian: apt-get install bubblewrap)"


@pytest.fixture
def no_bwrap(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_works", lambda python: WHY)


def test_auto_falls_back_and_explicit_bubblewrap_refuses(no_bwrap):
    assert choose_mechanism(Limits(sandbox="auto")) == "launcher"
    assert choose_mechanism(Limits(sandbox="launcher")) == "launcher"
    with pytest.raises(SandboxError, match="bubblewrap was asked for, but bwrap is not installed"):
        choose_mechanism(Limits(sandbox="bubblewrap"))


def test_missing_bubblewrap_is_a_verifier_error(no_bwrap):
    env = make_environment("code", {"sandbox": "bubblewrap"})
    row = {"tests": [{"input": "", "output": "1"}]}
    # inline (no pool): the monkeypatched check is the one the verifier sees
    v = run(env.verify(row, "```python\nprint(1)\n```", VerifyContext(pool=None)))
    assert (v.status, v.reward) == ("verifier_error", None), v
    assert "bubblewrap was asked for" in v.detail


def test_the_launchers_command_line_names_only_the_pipe_of_its_config():
    """Any process can read another's command line in /proc: the configuration (the
    program's argv, its environment) travels in a pipe."""
    cmd, fd = mechanisms.launcher_command("python3", {"argv": ["SECRET-ARGV"]})
    try:
        assert not any("SECRET-ARGV" in part for part in cmd) and cmd[-1] == str(fd)
        assert json.loads(os.read(fd, 1 << 16)) == {"argv": ["SECRET-ARGV"]}
    finally:
        os.close(fd)

"""`rewardprof install-profile`: the bare `--profile slurm` resolves to the shipped profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewardprof.cli import main
from rewardprof.tools.launch import Controller, default_snakemake_args
from rewardprof.tools.slurm_config import (
    ProfileInstallError,
    check_profile,
    install_profile,
    user_profile_root,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "profiles" / "slurm"


def test_link_install_is_idempotent_and_tracks_the_checkout(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert user_profile_root() == tmp_path / "xdg" / "snakemake"
    dest = install_profile(SHIPPED)
    assert dest == tmp_path / "xdg/snakemake/slurm" and dest.is_symlink()
    assert (dest / "config.yaml").read_text() == (SHIPPED / "config.yaml").read_text()
    assert install_profile(SHIPPED) == dest  # second install: nothing to do
    assert check_profile(SHIPPED) is None


def test_copy_install_detects_drift_and_force_replaces(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.yaml").write_text("executor: slurm\njobs: 10\n")
    root = tmp_path / "profiles"
    dest = install_profile(src, root=root, copy=True)
    assert not dest.is_symlink() and check_profile(src, root=root) is None
    (src / "config.yaml").write_text("executor: slurm\njobs: 20\n")  # the checkout moved on
    assert "differs" in check_profile(src, root=root)
    with pytest.raises(ProfileInstallError, match="--force"):
        install_profile(src, root=root, copy=True)
    install_profile(src, root=root, copy=True, force=True)
    assert (dest / "config.yaml").read_text().endswith("jobs: 20\n")


def test_cli_refuses_a_directory_without_a_profile(tmp_path, capsys):
    assert main(["install-profile", "--from", str(tmp_path), "--dest", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err  # the one error line of cli.main
    assert (
        err.startswith("rewardprof install-profile: error: ") and "not a Snakemake profile" in err
    )


def test_controller_command_always_reruns_incomplete(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert default_snakemake_args() == ["--profile", "profiles/slurm"]
    (tmp_path / "snakemake" / "slurm").mkdir(parents=True)
    assert default_snakemake_args() == ["--profile", "slurm"]
    cmd = Controller(str(tmp_path), ["--profile", "slurm"]).command()
    assert cmd[1:3] == ["-m", "snakemake"] and cmd[-1] == "--rerun-incomplete"
    # the requeued controller is a fresh object: no process handle is pickled
    import pickle

    c = Controller(str(tmp_path), ["-n"], attempt=1)
    c._proc = object()
    assert "_proc" not in pickle.loads(pickle.dumps(c)).__dict__

"""`rewardprof install-profile`: make `snakemake --profile slurm` find the shipped profile.

Snakemake resolves a bare profile name in the working directory, then in the user's config
directory (`$XDG_CONFIG_HOME/snakemake`, default ~/.config/snakemake), then the site's
(/etc/xdg/snakemake) -- never in the workflow's profiles/. Installing links
`<config dir>/slurm` to the checkout's profiles/slurm, so the installed profile is the shipped one
and stays in sync with it (a `--copy` install is checked with `--check`).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
from pathlib import Path

from rewardprof.core.errors import RewardprofError


class ProfileInstallError(RewardprofError, RuntimeError):
    """The profile cannot be installed (no profile at the source, a different one installed)."""


def user_profile_root() -> Path:
    """Where Snakemake looks for a user's profiles (same rule as Snakemake: appdirs/XDG)."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "snakemake"


def default_source() -> Path:
    return Path.cwd() / "profiles" / "slurm"


def _same_profile(dest: Path, source: Path) -> bool:
    if dest.is_symlink():
        return dest.resolve() == source.resolve()
    if dest.is_dir():
        cmp = filecmp.dircmp(dest, source)
        return not (cmp.left_only or cmp.right_only or cmp.diff_files)
    return False


def install_profile(
    source: Path | None = None,
    name: str = "slurm",
    root: Path | None = None,
    copy: bool = False,
    force: bool = False,
) -> Path:
    source = (source or default_source()).resolve()
    if not (source / "config.yaml").is_file() and not (source / "profile.yaml").is_file():
        raise ProfileInstallError(
            f"{source} is not a Snakemake profile (no config.yaml); run "
            f"from the workflow checkout or give --from PATH"
        )
    dest = (root or user_profile_root()) / name
    if dest.exists() or dest.is_symlink():
        if _same_profile(dest, source) and dest.is_symlink() != copy:
            return dest  # already installed: idempotent
        if not force:
            raise ProfileInstallError(
                f"{dest} exists and differs from {source}; use --force to replace it"
            )
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        else:
            shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    if copy:
        shutil.copytree(source, dest)
    else:
        dest.symlink_to(source, target_is_directory=True)
    return dest


def check_profile(
    source: Path | None = None, name: str = "slurm", root: Path | None = None
) -> str | None:
    """None when the installed profile is the shipped one, else what is wrong."""
    source = (source or default_source()).resolve()
    dest = (root or user_profile_root()) / name
    if not (dest.exists() or dest.is_symlink()):
        return f"{dest} is not installed"
    if not dest.exists():
        return f"{dest} is a dangling link (to {os.readlink(dest)})"
    if not _same_profile(dest, source):
        return f"{dest} differs from {source}; reinstall with --force"
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of `rewardprof install-profile` (the command table is in rewardprof.cli)."""
    p.add_argument(
        "--from",
        dest="source",
        type=Path,
        default=None,
        help="profile directory to install (default: ./profiles/slurm)",
    )
    p.add_argument("--name", default="slurm", help="profile name (default: slurm)")
    p.add_argument(
        "--dest",
        type=Path,
        default=None,
        help="profiles root (default: $XDG_CONFIG_HOME/snakemake or ~/.config/snakemake)",
    )
    p.add_argument(
        "--copy",
        action="store_true",
        help="copy instead of linking (then re-run after updating the checkout)",
    )
    p.add_argument("--force", action="store_true", help="replace a different installed profile")
    p.add_argument(
        "--check",
        action="store_true",
        help="only check that the installed profile matches; exit 1 if not",
    )


def run_command(args: argparse.Namespace) -> int:
    """`rewardprof install-profile`: install (or with --check, compare) the profile."""
    if args.check:
        problem = check_profile(args.source, args.name, args.dest)
        if problem:
            print(f"rewardprof install-profile: {problem}")
            return 1
        print("installed profile is up to date")
        return 0
    dest = install_profile(args.source, args.name, args.dest, args.copy, args.force)
    how = "copied to" if args.copy else "linked at"
    print(f"profile {args.name!r} {how} {dest}\nuse it with: snakemake --profile {args.name}")
    return 0

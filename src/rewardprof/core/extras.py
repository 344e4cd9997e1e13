"""Optional dependencies: which extra of pyproject.toml brings a package, and the one line that
says how to install it when it is missing.

The core install (`pip install -e .`) runs the math and multiple-choice environments; the other
verifier libraries, the plots and the Slurm launcher are extras. A package is looked for where
it is first needed (config validation for an entry's environment or generator, the report
command for matplotlib, `launch --slurm` for submitit) without importing it (`find_spec` costs
microseconds), so a missing one is a `MissingPackage` error, one line, never a traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from rewardprof.core.errors import RewardprofError

# extra of pyproject.toml -> what it is for (named in the message)
EXTRAS = {
    "environments": "the verifier libraries of the built-in environments beyond math",
    "report": "the plots of the profile report",
    "slurm": "Slurm execution",
}


class MissingPackage(RewardprofError, ImportError):
    """An optional package is not installed; the message names the extra that installs it."""


def install_line(extra: str) -> str:
    """How to install an extra: from the source checkout (the README's install), or from PyPI."""
    return (
        f"pip install -e '.[{extra}]' (in the source checkout; "
        f"else pip install 'rewardprof[{extra}]')"
    )


def missing_message(package: str, needed_by: str, extra: str) -> str:
    return (
        f"{needed_by} needs the Python package {package!r}, which is not installed; "
        f"install the {extra!r} extra: {install_line(extra)}"
    )


def is_installed(package: str) -> bool:
    """Whether `package` (a top-level module name) can be imported, without importing it."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def check(packages: tuple[str, ...], needed_by: str, extra: str) -> None:
    """MissingPackage naming the first of `packages` that is not installed."""
    for package in packages:
        if not is_installed(package):
            raise MissingPackage(missing_message(package, needed_by, extra))


def require(package: str, needed_by: str, extra: str) -> ModuleType:
    """Import `package`; a missing one (itself, not one of its own imports) is MissingPackage."""
    try:
        return importlib.import_module(package)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.split(".")[0] != package.split(".")[0]:
            raise  # the package is there but broken: its own traceback says why
        raise MissingPackage(missing_message(package, needed_by, extra)) from None


# a workflow step (rule) -> (the packages it imports, what needs them, the extra): checked for
# every step the DAG will run before its first job (rules/checks.smk), so a core-only install
# does not run every rollout and then fail on the plots
STEP_PACKAGES = {"report": (("matplotlib",), "the workflow's report step (its plots)", "report")}


def check_steps(steps: set[str]) -> None:
    """MissingPackage for the first step in `steps` whose optional packages are missing."""
    for step in sorted(steps & STEP_PACKAGES.keys()):
        check(*STEP_PACKAGES[step])

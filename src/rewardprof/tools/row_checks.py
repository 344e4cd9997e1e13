"""What `rewardprof validate` checks in the entries' rows before any job runs: the NLTK data
their instruction checks need (listed, and missing data named with its install command).

Materialize checks the same per row and fails on the first row that needs missing data; this
reads the rows of every file entry (the first `limit` of them for `sample: head`, all of them
otherwise: a superset of the selection) so that `validate` says it before the workflow starts.
"""

from __future__ import annotations

from pathlib import Path

from rewardprof.core.config import Config, Entry, GeneratorSource
from rewardprof.environments import make_environment
from rewardprof.environments.instruction_following import checks, row_fields
from rewardprof.sources.files import SourceError, iter_rows, resolve_source


def _entry_needs(cfg: Config, i: int, base_dir: Path | None) -> dict[str, set[str]]:
    entry = cfg.entries[i]
    needs: dict[str, set[str]] = {}
    for n, (_lineno, row) in enumerate(iter_rows(entry, base_dir)):
        if entry.sample == "head" and entry.limit is not None and n >= entry.limit:
            break
        ids = row_fields(row)["instruction_id_list"]
        for iid in ids if isinstance(ids, list) else []:
            for resource in checks.nltk_needs(str(iid)):
                needs.setdefault(resource, set()).add(str(iid))
    return needs


def _readable(entry: Entry, base_dir: Path | None) -> bool:
    try:
        resolve_source(entry, base_dir)
    except SourceError:
        return False  # a missing source is the preflight's error (check_sources), not this one
    return True


def nltk_report(cfg: Config, base_dir: Path | None = None) -> tuple[list[str], list[str]]:
    """(one line per entry and NLTK resource its rows need, one error line per resource that
    is missing where the entry does not allow running without it)."""
    lines: list[str] = []
    missing: list[str] = []
    for i, entry in enumerate(cfg.entries):
        if isinstance(entry.source, GeneratorSource):
            continue
        env = make_environment(entry.environment, entry.options)
        if not hasattr(env, "nltk_missing") or not _readable(entry, base_dir):
            continue
        allow = getattr(env.options, "nltk_missing", "fail") == "unavailable"
        for resource, ids in sorted(_entry_needs(cfg, i, base_dir).items()):
            state = "installed" if checks.nltk_installed(resource) else "NOT INSTALLED"
            if state != "installed" and allow:
                state += " (options.nltk_missing: unavailable: those checks are left out)"
            lines.append(
                f"entries[{i}] ({entry.label}): NLTK data {resource!r} needed by "
                f"{', '.join(sorted(ids))}: {state}"
            )
            if not checks.nltk_installed(resource) and not allow:
                missing.append(
                    f"entries[{i}] ({entry.label}): instruction {sorted(ids)[0]} needs NLTK data "
                    f"{resource!r}, which is not installed: install it with "
                    f"{checks.install_hint(resource)}"
                )
    return lines, missing

"""Write-then-rename helpers: an output either appears whole or not at all."""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(final: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `final`; rename it over `final` only if the block succeeds."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    _remove_dead_writers_tmp(final, host)
    tmp = final.with_name(f".{final.name}.tmp-{host}-{os.getpid()}")
    try:
        yield tmp
        if tmp.is_file():
            with tmp.open("rb") as f:
                os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        _remove(tmp)
        raise


def _remove_dead_writers_tmp(final: Path, host: str) -> None:
    """A SIGKILLed writer (scancel, OOM, a node lost) leaves its temp file behind; its next
    writer removes it. Only temp files of this host whose process is gone: on a shared
    filesystem another node's pid says nothing here."""
    for tmp in final.parent.glob(f".{final.name}.tmp-{host}-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            _remove(tmp)


def _remove(tmp: Path) -> None:
    """A temp output: a file, or a directory (a Parquet dataset)."""
    if tmp.is_dir():
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        tmp.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    return True


def write_json_atomic(path: str | Path, data: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")

#!/usr/bin/env bash
# Bytecode for an environment, on every core: scripts/compile-bytecode.sh PYTHON [DIR ...]
# compiles PYTHON's site-packages and each DIR (e.g. an editable checkout's src/). Installs pass
# pip --no-compile (pip compiles one file at a time) and call this instead. Without .pyc files,
# an interpreter that cannot write __pycache__ (PYTHONDONTWRITEBYTECODE, a read-only shared venv)
# compiles every module it imports again in every process: for a vLLM server, 18 s more CPU per
# start (docs/engine.md). A DIR must compile whole; site-packages may hold a few files meant for
# another Python (e.g. torch's py312 test helpers) that are never imported: they are reported in
# one line and the rest is compiled.
set -euo pipefail
PY=${1:?usage: compile-bytecode.sh PYTHON [DIR ...]}
shift
for dir in "$@"; do
  "$PY" -m compileall -q -j 0 "$dir"
done
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# -W: a dependency's SyntaxWarnings (e.g. `is` with a literal) are its authors' to fix, not
# news for whoever installs
if ! "$PY" -W ignore::SyntaxWarning -m compileall -q -q -j 0 "$site"; then
  version=$("$PY" -c 'import sys; print(*sys.version_info[:2], sep=".")')
  echo "compile-bytecode: some files of $site are not valid Python $version (never imported); the rest is compiled"
fi

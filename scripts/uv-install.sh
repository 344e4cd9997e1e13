#!/usr/bin/env bash
# pip install, done by uv: scripts/uv-install.sh PYTHON ARGS...  installs ARGS (requirements and
# `uv pip install` options) into PYTHON's environment. uv resolves and installs on every core in
# a fraction of pip's time and CPU (docs/engine.md); it is installed from PyPI into that
# environment first, with pip.
#
# uv reads its own settings, not pip's: the package indexes, find-links directories, constraint
# files and CA bundle pip is configured with (pip.conf, PIP_* variables) are handed to it, so an
# install behind a private index or a local wheel directory gets the same packages as under pip.
set -euo pipefail
PY=${1:?usage: uv-install.sh PYTHON ARGS...}
shift
env_bin=$(dirname "$PY")
"$PY" -m pip install --disable-pip-version-check -q "uv>=0.9,<1"

options=()
while IFS= read -r line; do
  key=${line%%=*}
  key=${key#*.}
  value=${line#*=\'}
  value=${value%\'}
  case "$key" in
    index-url | extra-index-url | find-links | constraint)
      for v in $value; do options+=("--$key" "$v"); done
      ;;
    cert) export SSL_CERT_FILE="$value" ;;
  esac
done < <("$PY" -m pip config list 2>/dev/null)

# unsafe-best-match is pip's rule: the best version from all indexes (uv's default takes a
# package from the first index that has it)
exec "$env_bin/uv" pip install -q --python "$PY" --index-strategy unsafe-best-match \
  "${options[@]}" "$@"

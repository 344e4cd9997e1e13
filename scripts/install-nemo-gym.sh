#!/usr/bin/env bash
# NeMo Gym 0.7.0 in its own environment (default .venv-nemo-gym): the tests run its resource
# servers from the wheel as remote servers of the `nemo_gym` environment
# (tests/functional/environments/test_nemo_gym_server.py). rewardprof itself never imports it.
#
# The wheel says Requires-Python >= 3.13.14; the Python 3.13 found here may be older (pyenv's
# 3.13.0 on the CI machines), on which its servers run as tested: hence the install resolves
# as for 3.13.14 (below).
# Which interpreter: $NEMO_GYM_PYTHON, else pyenv's newest 3.13, else python3.13 on PATH.
set -euo pipefail
venv="${1:-.venv-nemo-gym}"
python="${NEMO_GYM_PYTHON:-}"
if [[ -z "$python" ]] && command -v pyenv >/dev/null; then
  version="$(pyenv versions --bare | grep -E '^3\.13(\.[0-9]+)?$' | sort -V | tail -1 || true)"
  [[ -n "$version" ]] && python="$(pyenv prefix "$version")/bin/python"
fi
[[ -z "$python" ]] && python="$(command -v python3.13 || true)"
if [[ -z "$python" ]]; then
  # a developer machine without Python 3.13: the tests that need NeMo Gym skip (under CI=true
  # they fail), everything else runs
  echo "install-nemo-gym: no Python 3.13 found (set NEMO_GYM_PYTHON to one); NeMo Gym not installed" >&2
  [[ "${CI:-}" == "true" ]] && exit 1
  exit 0
fi
test -x "$venv/bin/python" || "$python" -m venv "$venv"
# uv (scripts/uv-install.sh) resolves and installs NeMo Gym's 159 packages: pip took 97 s and
# 77 s of CPU for them, uv 9 s and 9 s (cold caches, idle 2-core machine), the same packages at
# the same versions.
bash "$(dirname "$0")/uv-install.sh" "$venv/bin/python" --python-version 3.13.14 "nemo-gym==0.7.0"
"$venv/bin/python" -c "import nemo_gym, resources_servers.example_session_state_mgmt.app"

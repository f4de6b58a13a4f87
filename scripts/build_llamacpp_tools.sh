#!/usr/bin/env bash
# Build llama.cpp's own tools (llama-server, llama-speculative-simple) from the very llama.cpp source
# vendored in the pinned llama-cpp-python, so `homespec bench --against llama-server` compares homespec
# with the same llama.cpp its llamacpp backend runs. Not needed to use homespec.
#   bash scripts/build_llamacpp_tools.sh          build (or reuse the cached build) and print the bin dir
#   HOMESPEC_LLAMA_BUILD=cpu|cuda|metal           force a variant (default: as scripts/setup.sh decides)
# The build is cached per version, variant and host CPU, like setup.sh's wheel:
#   ${XDG_CACHE_HOME:-~/.cache}/homespec/llama-tools/llama-<version>-<variant>-<cpu>/bin/llama-server
# The source is the llama-cpp-python sdist: taken from HOMESPEC_LLAMA_SDIST (a .tar.gz) when set, else from
# the cache (homespec/sdist/, or gpu-check/sdist/ where scripts/gpu_check.sh left one), else `pip download`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/llama_build.sh
want=$llama_version
PY=${PYTHON:-.venv/bin/python}
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/homespec"

build=$(llama_variant)
read -r -a cmake_args <<< "$(llama_cmake_args "$build")"
cpu_id=$(host_cpu_id)
out="$cache_root/llama-tools/llama-$want-$build-$cpu_id"
if [[ -x "$out/bin/llama-server" ]]; then
  echo "$out/bin"
  exit 0
fi

# --- the sdist: the exact llama.cpp tree llama-cpp-python $want vendors -----------------------
sdist=${HOMESPEC_LLAMA_SDIST:-}
if [[ -z "$sdist" ]]; then
  for c in "$cache_root/sdist/llama_cpp_python-$want.tar.gz" "$cache_root/gpu-check/sdist/llama_cpp_python-$want.tar.gz"; do
    [[ -f "$c" ]] && { sdist=$c; break; }
  done
fi
if [[ -z "$sdist" ]]; then
  mkdir -p "$cache_root/sdist"
  echo "build_llamacpp_tools: downloading the llama-cpp-python $want sdist" >&2
  "$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$want" -d "$cache_root/sdist"
  sdist="$cache_root/sdist/llama_cpp_python-$want.tar.gz"
fi
[[ -f "$sdist" ]] || { echo "error: no sdist at $sdist" >&2; echo "hint: set HOMESPEC_LLAMA_SDIST to llama_cpp_python-$want.tar.gz" >&2; exit 1; }

work="$out.tmp"
rm -rf "$work" && mkdir -p "$work"
tar xzf "$sdist" -C "$work"
src="$work/llama_cpp_python-$want/vendor/llama.cpp"
[[ -f "$src/CMakeLists.txt" ]] || { echo "error: $sdist holds no vendor/llama.cpp" >&2; exit 1; }

# --- configure and build only the two tools (no tests, no examples beyond them) -----------------
jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
echo "build_llamacpp_tools: building llama-server for $build with $jobs jobs (several minutes)" >&2
cmake -S "$src" -B "$work/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
  "${cmake_args[@]}" >&2
nice cmake --build "$work/build" -j "$jobs" --target llama-server llama-speculative-simple >&2

mkdir -p "$work/bin"
for t in llama-server llama-speculative-simple; do
  cp "$work/build/bin/$t" "$work/bin/$t"
done
echo "$want $build $(date -u +%Y-%m-%dT%H:%M:%SZ) $(basename "$sdist")" > "$work/bin/BUILD_INFO"
rm -rf "$out" && mkdir -p "$out" && mv "$work/bin" "$out/bin" && rm -rf "$work"
echo "$out/bin"

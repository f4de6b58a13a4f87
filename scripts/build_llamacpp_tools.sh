#!/usr/bin/env bash
# Build llama.cpp's own tools (llama-server, llama-speculative-simple) from the very llama.cpp source
# vendored in the pinned llama-cpp-python, with the same patch applied (kernels/llamacpp/eagle3.1.patch),
# so `homespec bench --against llama-server` compares homespec with the same llama.cpp its llamacpp
# backend runs. Not needed to use homespec.
#   bash scripts/build_llamacpp_tools.sh          build (or reuse the cached build) and print the bin dir
#   HOMESPEC_LLAMA_BUILD=cpu|cuda|metal           force a variant (default: as scripts/setup.sh decides)
# The build is cached per version, variant and host CPU, like setup.sh's wheel:
#   ${XDG_CACHE_HOME:-~/.cache}/homespec/llama-tools/llama-<version>-<variant>-<cpu>-p<patch>/bin/llama-server
# Like setup.sh's wheel, the build is proved by a smoke test (llama-simple decodes the embedded model);
# one whose AMX kernels crash is rebuilt as <variant>-noamx (HOMESPEC_LLAMA_AMX=auto|on|off as in setup).
# bin/SMOKE records the verdict: pass, or crash/wrong with the detail.
# The source is the llama-cpp-python sdist: taken from HOMESPEC_LLAMA_SDIST (a .tar.gz) when set, else from
# the cache (homespec/sdist/, or gpu-check/sdist/ where scripts/gpu_check.sh left one), else `pip download`
# (scripts/lib/llama_build.sh, llama_sdist).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/llama_build.sh
want=$llama_version
PY=${PYTHON:-.venv/bin/python}
cache_root=$llama_cache_root

base=$(llama_variant)
amx=$(llama_amx_choice) || exit 1
cpu_id=$(host_cpu_id)
patch_id=$(llama_patch_id)

# build_tools VARIANT: configure and build only the tools (no tests), into the cache; prints the folder
build_tools() {
  local variant=$1 out="$cache_root/llama-tools/llama-$want-$1-$cpu_id-p$patch_id"
  if [[ -x "$out/bin/llama-server" && -x "$out/bin/llama-simple" ]]; then echo "$out"; return 0; fi
  local work src flags jobs gen=() cmake_args
  work="$out.tmp"
  rm -rf "$work" && mkdir -p "$work"
  src=$(llama_source "$work") || return 1
  src="$src/vendor/llama.cpp"
  read -r -a cmake_args <<< "$(llama_cmake_args "${variant%-noamx}")"
  flags=$(llama_cflags "$variant")
  jobs=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)}
  command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
  echo "build_llamacpp_tools: building llama-server for $variant with $jobs jobs (several minutes)" >&2
  CFLAGS="${CFLAGS:-} $flags" CXXFLAGS="${CXXFLAGS:-} $flags" \
    cmake -S "$src" -B "$work/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF \
    "${cmake_args[@]}" >&2 || return 1
  nice cmake --build "$work/build" -j "$jobs" --target llama-server llama-speculative-simple llama-simple >&2 || return 1
  mkdir -p "$work/bin"
  for t in llama-server llama-speculative-simple llama-simple; do
    cp "$work/build/bin/$t" "$work/bin/$t"
  done
  echo "$want $variant $(date -u +%Y-%m-%dT%H:%M:%SZ) $(basename "$(llama_sdist)") $llama_patch $patch_id" \
    > "$work/bin/BUILD_INFO"
  rm -rf "$out" && mkdir -p "$out" && mv "$work/bin" "$out/bin" && rm -rf "$work"
  echo "$out"
}

# smoke_tools DIR: llama-simple decodes "The capital of France is" with the embedded model; 0 pass,
# 3 killed by a signal, 4 wrong tokens, 1 could not run. The verdict goes to DIR/bin/SMOKE.
smoke_tools() {
  local bin="$1/bin" model rc=0 text
  model=$("$PY" -c 'from homespec.embedded import smollm2_path; print(smollm2_path())') || return 1
  text=$("$bin/llama-simple" -m "$model" -n 4 "The capital of France is" 2> "$bin/SMOKE.log") || rc=$?
  if ((rc > 128)); then
    echo "crash $(kill -l $((rc - 128)) 2>/dev/null || echo $rc)" > "$bin/SMOKE"
    echo "build_llamacpp_tools: llama-simple crashed with SIG$(kill -l $((rc - 128)) 2>/dev/null) in the smoke test" >&2
    return 3
  fi
  if ((rc != 0)) || [[ "$text" != *Paris* ]]; then
    echo "wrong ${text//$'\n'/ }" > "$bin/SMOKE"
    echo "build_llamacpp_tools: llama-simple decoded ${text@Q} in the smoke test (exit $rc)" >&2
    return 4
  fi
  echo pass > "$bin/SMOKE"
  echo "build_llamacpp_tools: smoke test passed (llama-simple decoded${text#*The capital of France is})" >&2
}

variant=$base
[[ $amx == off ]] && llama_can_drop_amx "$base" && variant=$base-noamx
out=$(build_tools "$variant") || { llama_error "building llama.cpp's tools ($variant) failed"; exit 1; }
rc=0
smoke_tools "$out" || rc=$?
if ((rc == 3 || rc == 4)) && [[ $amx == auto ]] && llama_can_drop_amx "$variant"; then
  echo "build_llamacpp_tools: llama.cpp's AMX kernels crash on this CPU (llama.cpp #20824); built without AMX" >&2
  variant=$variant-noamx rc=0
  out=$(build_tools "$variant") || { llama_error "building llama.cpp's tools ($variant) failed"; exit 1; }
  smoke_tools "$out" || rc=$?
fi
((rc == 0)) || { llama_error "llama.cpp's tools ($variant) fail their smoke test (exit $rc)"; exit 1; }
echo "$out/bin"

# Shared by scripts/setup.sh (the llama-cpp-python wheel) and scripts/build_llamacpp_tools.sh
# (llama.cpp's own tools): which llama.cpp is built, for which variant, cached under which id.
# Sourced, not run: it defines a version and three functions and changes nothing.

llama_version=0.3.36  # the pinned llama-cpp-python; its vendored llama.cpp is what both scripts build

# llama_variant: print cpu, cuda or metal: HOMESPEC_LLAMA_BUILD when set, else what this machine has
# (CUDA needs a GPU that answers *and* nvcc: a compiler alone is not enough; Metal on Apple Silicon).
llama_variant() {
  local build=${HOMESPEC_LLAMA_BUILD:-auto}
  if [[ "$build" == auto ]]; then
    build=cpu
    if [[ "$(uname -s)" == Darwin && "$(uname -m)" == arm64 ]]; then
      build=metal
    elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && command -v nvcc >/dev/null 2>&1; then
      build=cuda
    fi
  fi
  case "$build" in
    cpu|cuda|metal) echo "$build" ;;
    *) echo "error: HOMESPEC_LLAMA_BUILD=$build is not one of cpu, cuda, metal" >&2
       echo "hint: unset it to pick the variant from this machine" >&2; return 2 ;;
  esac
}

# llama_cmake_args VARIANT: the CMake flags that select it, space-separated
llama_cmake_args() {
  case "$1" in
    cpu)   echo "-DGGML_CUDA=OFF -DGGML_METAL=OFF" ;;
    cuda)  echo "-DGGML_CUDA=ON" ;;
    metal) echo "-DGGML_METAL=ON" ;;
  esac
}

# host_cpu_id: a checksum of this CPU's instruction-set flags. A default build uses the host's
# instruction set, so builds are cached per CPU as well as per version and variant.
host_cpu_id() {
  (grep -m1 -E '^flags' /proc/cpuinfo 2>/dev/null || sysctl -n machdep.cpu.brand_string 2>/dev/null || uname -m) \
    | cksum | cut -d' ' -f1
}

# --- AMX: a build whose AMX kernels crash is rebuilt without them (docs/backends.md, "AMX") --------

# llama_amx_choice: auto, on or off from HOMESPEC_LLAMA_AMX (on: keep AMX whatever the smoke test says;
# off: build without AMX from the start)
llama_amx_choice() {
  local c=${HOMESPEC_LLAMA_AMX:-auto}
  case "${c,,}" in
    auto|on|off) echo "${c,,}" ;;
    *) echo "error: HOMESPEC_LLAMA_AMX=$c is not one of auto, on, off" >&2
       echo "hint: unset it to let setup's smoke test decide" >&2; return 2 ;;
  esac
}

# llama_can_drop_amx VARIANT: true where a build without AMX exists (x86-64 CPU and CUDA builds)
llama_can_drop_amx() {
  [[ "$(uname -m)" == x86_64 && "$1" != metal && "$1" != *-noamx ]]
}

# llama_cflags VARIANT: extra C and C++ flags; -noamx variants keep GGML_NATIVE's -march=native but
# not its AMX instructions (GCC and Clang honour an explicit -mno-* whatever -march comes after it)
llama_cflags() {
  [[ "$1" == *-noamx ]] && echo "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" || true
}

# llama_wheel VARIANT: print the folder holding the cached wheel of VARIANT, building it first if needed
llama_wheel() {
  local variant=$1 base=${1%-noamx}
  local cache="${XDG_CACHE_HOME:-$HOME/.cache}/homespec/wheels/llama-$llama_version-$variant-$(host_cpu_id)"
  if ! ls "$cache"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    local flags cmake_args
    flags=$(llama_cflags "$variant")
    cmake_args=$(llama_cmake_args "$base")
    echo "setup: building llama-cpp-python $llama_version for $variant (several minutes)" >&2
    rm -rf "$cache.tmp" && mkdir -p "$cache.tmp"
    CFLAGS="${CFLAGS:-} $flags" CXXFLAGS="${CXXFLAGS:-} $flags" CMAKE_ARGS="$cmake_args" \
      CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)} \
      "$LLAMA_PY" -m pip -q --disable-pip-version-check wheel --no-deps --no-binary llama-cpp-python \
      --no-cache-dir -w "$cache.tmp" "llama-cpp-python==$llama_version" 2> >(grep -v "is ignored" >&2) || return 1
    rm -rf "$cache" && mv "$cache.tmp" "$cache"
  fi
  echo "$cache"
}

# llama_install VARIANT [WHY]: install VARIANT's wheel into the venv (replacing another variant of the
# same version) and note which variant it is, and why (homespec probe prints it); a no-op when it is
# already the one installed
llama_install() {
  local variant=$1 why=${2:-} have note="$LLAMA_VENV/homespec-llama-variant"
  have=$("$LLAMA_PY" -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))" 2>/dev/null || true)
  if [[ "$have" == "$llama_version" && "$(head -1 "$note" 2>/dev/null || echo "${1%-noamx}")" == "$variant" ]]; then
    return 0
  fi
  local dir
  dir=$(llama_wheel "$variant") || return 1
  "$LLAMA_PY" -m pip -q --disable-pip-version-check install --no-deps --force-reinstall "$dir"/llama_cpp_python-*.whl \
    2> >(grep -v "is ignored" >&2) || return 1
  printf '%s\n%s\n' "$variant" "$why" > "$note"
}

# llama_smoke VARIANT: the smoke test of the installed build (homespec.backends.llamacpp.smoke);
# returns its exit code: 0 passed, 3 crashed / 4 wrong tokens with the AMX / repack buffers only,
# 5 failed without them too (no build without AMX will help), 1 could not run
llama_smoke() {
  local rc=0
  "$LLAMA_PY" -m homespec.backends.llamacpp.smoke --variant "$1" --record || rc=$?
  return $rc
}

# llama_install_checked: install the variant this machine wants, prove it decodes, and fall back to a
# build without AMX when the smoke test crashes or decodes wrong tokens. 0 ok; 1 with `error:` lines.
# Not under `set -e` when called after `||`, so every step is checked by hand.
llama_install_checked() {
  LLAMA_PY=${LLAMA_PY:-.venv/bin/python}
  LLAMA_VENV=${LLAMA_VENV:-.venv}
  local base amx variant rc=0
  base=$(llama_variant) || return 1
  amx=$(llama_amx_choice) || return 1
  variant=$base
  local why=""
  if [[ $amx == off ]] && llama_can_drop_amx "$base"; then variant=$base-noamx why="HOMESPEC_LLAMA_AMX=off at set-up"; fi
  # a second run keeps what an earlier one found here: a build without AMX because AMX crashed
  local note="$LLAMA_VENV/homespec-llama-variant"
  if [[ $amx == auto && "$(head -1 "$note" 2>/dev/null)" == "$base-noamx" ]] && grep -q "AMX kernels crash" "$note"; then
    variant=$base-noamx why=$(sed -n 2p "$note")
  fi
  llama_install "$variant" "$why" || { llama_error "building or installing llama-cpp-python ($variant) failed"; return 1; }
  llama_smoke "$variant" || rc=$?
  if ((rc == 3 || rc == 4)) && [[ $amx == auto ]] && llama_can_drop_amx "$variant"; then
    echo "setup: llama.cpp's AMX kernels crash on this CPU (llama.cpp #20824); built without AMX" >&2
    variant=$variant-noamx rc=0
    llama_install "$variant" "llama.cpp's AMX kernels crash on this CPU (llama.cpp #20824)" || { llama_error "building or installing llama-cpp-python ($variant) failed"; return 1; }
    llama_smoke "$variant" || rc=$?
  fi
  ((rc == 0)) && return 0
  llama_error "the llama-cpp-python build ($variant) fails its smoke test (exit $rc)"
  return 1
}

llama_error() {
  echo "error: $1" >&2
  echo "hint: see the lines above; HOMESPEC_LLAMA_AMX=off builds without AMX, HOMESPEC_LLAMA_BUILD=cpu forces the CPU build (docs/backends.md, \"AMX\")" >&2
}

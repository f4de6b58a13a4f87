# Shared by scripts/setup.sh (the llama-cpp-python wheel) and scripts/build_llamacpp_tools.sh
# (llama.cpp's own tools): which llama.cpp is built, from which patched source, for which variant,
# cached under which id. Sourced, not run (from the repository root): it defines a version, a patch
# and functions, and changes nothing.

llama_version=0.3.36  # the pinned llama-cpp-python; its vendored llama.cpp is what both scripts build
# applied to that llama.cpp before either build: EAGLE-3.1's fc_norm / norm_output in the eagle3
# graph (kernels/llamacpp/README.md)
llama_patch=kernels/llamacpp/eagle3.1.patch
llama_cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/homespec"

# llama_patch_id: the first 12 hex digits of the patch's SHA-256; part of every cache id, so a
# changed patch rebuilds
llama_patch_id() {
  local sum
  sum=$( (sha256sum 2>/dev/null || shasum -a 256) < "$llama_patch") || return 1
  echo "${sum:0:12}"
}

# llama_sdist: print the path of the llama-cpp-python $llama_version sdist: HOMESPEC_LLAMA_SDIST (a
# .tar.gz) when set, else the cache (homespec/sdist/, or gpu-check/sdist/ where scripts/gpu_check.sh
# left one), else `pip download` into the cache
llama_sdist() {
  local sdist=${HOMESPEC_LLAMA_SDIST:-} c py=${LLAMA_PY:-${PY:-.venv/bin/python}}
  if [[ -z "$sdist" ]]; then
    for c in "$llama_cache_root/sdist/llama_cpp_python-$llama_version.tar.gz" \
             "$llama_cache_root/gpu-check/sdist/llama_cpp_python-$llama_version.tar.gz"; do
      [[ -f "$c" ]] && { sdist=$c; break; }
    done
  fi
  if [[ -z "$sdist" ]]; then
    mkdir -p "$llama_cache_root/sdist"
    echo "setup: downloading the llama-cpp-python $llama_version source" >&2
    "$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
      "llama-cpp-python==$llama_version" -d "$llama_cache_root/sdist" 2> >(grep -v "is ignored" >&2) || return 1
    sdist="$llama_cache_root/sdist/llama_cpp_python-$llama_version.tar.gz"
  fi
  [[ -f "$sdist" ]] || { echo "error: no llama-cpp-python sdist at $sdist" >&2
    echo "hint: set HOMESPEC_LLAMA_SDIST to llama_cpp_python-$llama_version.tar.gz" >&2; return 1; }
  echo "$sdist"
}

# llama_source DIR: extract the sdist into DIR, apply the patch to its llama.cpp, print the source
# root (DIR/llama_cpp_python-$llama_version; its llama.cpp is vendor/llama.cpp below it)
llama_source() {
  local dir=$1 sdist root patch
  sdist=$(llama_sdist) || return 1
  case $llama_patch in /*) patch=$llama_patch ;; *) patch="$(pwd)/$llama_patch" ;; esac
  mkdir -p "$dir" && tar xzf "$sdist" -C "$dir" || return 1
  root="$dir/llama_cpp_python-$llama_version"
  [[ -f "$root/vendor/llama.cpp/CMakeLists.txt" ]] || { echo "error: $sdist holds no vendor/llama.cpp" >&2; return 1; }
  if command -v patch >/dev/null 2>&1; then
    patch -p1 -N -s -F0 -d "$root/vendor/llama.cpp" < "$patch" >&2 || { llama_patch_error; return 1; }
  else
    (cd "$root/vendor/llama.cpp" && git apply -p1 "$patch") || { llama_patch_error; return 1; }
  fi
  echo "$root"
}

llama_patch_error() {
  echo "error: $llama_patch does not apply to llama-cpp-python $llama_version's llama.cpp" >&2
  echo "hint: the patch and the pinned version must change together (kernels/llamacpp/README.md)" >&2
}

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
# (from the sdist with the patch applied; cached per version, variant, host CPU and patch)
llama_wheel() {
  local variant=$1 base=${1%-noamx} id
  id=$(llama_patch_id) || return 1
  local cache="$llama_cache_root/wheels/llama-$llama_version-$variant-$(host_cpu_id)-p$id"
  if ! ls "$cache"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    local flags cmake_args src
    flags=$(llama_cflags "$variant")
    cmake_args=$(llama_cmake_args "$base")
    echo "setup: building llama-cpp-python $llama_version for $variant with $llama_patch (several minutes)" >&2
    rm -rf "$cache.tmp" && mkdir -p "$cache.tmp"
    src=$(llama_source "$cache.tmp/src") || return 1
    CFLAGS="${CFLAGS:-} $flags" CXXFLAGS="${CXXFLAGS:-} $flags" CMAKE_ARGS="$cmake_args" \
      CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc 2>/dev/null || echo 2)} \
      "$LLAMA_PY" -m pip -q --disable-pip-version-check wheel --no-deps --no-cache-dir -w "$cache.tmp/wheel" "$src" \
      2> >(grep -v "is ignored" >&2) || return 1
    rm -rf "$cache" && mkdir -p "$cache" && mv "$cache.tmp"/wheel/llama_cpp_python-*.whl "$cache/" && rm -rf "$cache.tmp"
  fi
  echo "$cache"
}

# llama_install VARIANT [WHY]: install VARIANT's wheel into the venv (replacing another variant, or an
# unpatched build, of the same version) and note which variant it is, why (homespec probe prints it)
# and which patch it carries; a no-op when it is already the one installed
llama_install() {
  local variant=$1 why=${2:-} have note="$LLAMA_VENV/homespec-llama-variant" id
  id=$(llama_patch_id) || return 1
  have=$("$LLAMA_PY" -c "import importlib.metadata as m; print(m.version('llama_cpp_python'))" 2>/dev/null || true)
  if [[ "$have" == "$llama_version" && "$(head -1 "$note" 2>/dev/null)" == "$variant" \
        && "$(sed -n 3p "$note" 2>/dev/null)" == "patch $id" ]]; then
    return 0
  fi
  local dir
  dir=$(llama_wheel "$variant") || return 1
  "$LLAMA_PY" -m pip -q --disable-pip-version-check install --no-deps --force-reinstall "$dir"/llama_cpp_python-*.whl \
    2> >(grep -v "is ignored" >&2) || return 1
  printf '%s\n%s\npatch %s\n' "$variant" "$why" "$id" > "$note"
}

# llama_smoke VARIANT: the smoke test of the installed build (homespec.backends.llamacpp.smoke);
# returns its exit code: 0 passed, 3 crashed / 4 wrong tokens with the AMX / repack buffers only,
# 5 failed without them too (no build without AMX will help), 6 decodes but lacks an entry point
# homespec calls (the patch did not make it into the build), 1 could not run
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
  ((rc == 0 || rc == 6)) && return $rc  # 6 said its own error: and hint:
  llama_error "the llama-cpp-python build ($variant) fails its smoke test (exit $rc)"
  return 1
}

llama_error() {
  echo "error: $1" >&2
  echo "hint: see the lines above; HOMESPEC_LLAMA_AMX=off builds without AMX, HOMESPEC_LLAMA_BUILD=cpu forces the CPU build (docs/backends.md, \"AMX\")" >&2
}

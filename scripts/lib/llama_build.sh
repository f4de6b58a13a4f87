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

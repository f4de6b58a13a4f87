# The GPU check's llama.cpp: packed on the CPU machine (prepare), built on the GPU machine (call 1).
# Sourced by scripts/gpu_check.sh after scripts/lib/llama_build.sh (the pinned version, the patch).
#
# One CMake tree of llama-cpp-python's own CMakeLists (the one `pip wheel` builds, so the libraries
# are configured as setup.sh's are), with only the targets the check runs: libllama and libggml
# (+ its CUDA backend) for llama-cpp-python, and llama-server from the same objects for the
# yardstick. The CUDA objects, nearly all of the build's time, are compiled once for both.

# what a build of libllama, ggml and llama-server never reads (paths under vendor/llama.cpp); the
# other tools stay (their CMakeLists are read at configure time) and are not built
GPU_LLAMA_DROP=(docs models media benches tests examples app pocs skills ci gguf-py conversion grammars
  requirements tools/server/tests tools/server/public_legacy tools/mtmd/test-1.jpeg tools/mtmd/test-2.mp3
  tools/mtmd/test-3.mp4)
GPU_LLAMA_BACKENDS_DROP=(blas cann et hexagon hip metal musa opencl openvino rpc sycl virtgpu vulkan webgpu zdnn zendnn)
GPU_LLAMA_TARGETS=(llama ggml llama-server)

# gpu_llama_pack OUT.tar.xz: the pinned sdist with homespec's patch applied (llama_source), trimmed
gpu_llama_pack() {
  local out=$1 work top l b
  work=$(mktemp -d)
  top=$(llama_source "$work") || { rm -rf "$work"; return 1; }
  l="$top/vendor/llama.cpp"
  rm -rf "${top:?}"/.git* "$top"/{docs,examples,tests,docker,scripts} "${l:?}"/.git* "$l"/*.py
  for b in "${GPU_LLAMA_DROP[@]}"; do rm -rf "${l:?}/$b"; done
  for b in "${GPU_LLAMA_BACKENDS_DROP[@]}"; do rm -rf "$l/ggml/src/ggml-$b"; done
  # the web UI's sources (npm) and llama.cpp's helper scripts: only the .cmake files are read
  find "$l/tools/ui" -mindepth 1 -maxdepth 1 ! -name CMakeLists.txt ! -name '*.cmake' ! -name '*.in' -exec rm -rf {} +
  find "$l/scripts" -mindepth 1 ! -name '*.cmake' -exec rm -rf {} + 2>/dev/null
  [[ -d $l/ggml/src/ggml-cuda && -f $l/tools/server/server.cpp ]] || { echo "error: the trimmed source lacks ggml-cuda or the server" >&2; rm -rf "$work"; return 1; }
  # fixed order and times: the same inputs give the same file, and a rebuilt tree from it is up to date
  tar cJf "$out" --sort=name --mtime=2000-01-01T00:00:00Z --owner=0 --group=0 --numeric-owner \
    -C "$work" "$(basename "$top")"
  rm -rf "$work"
}

# gpu_llama_configure SRC BUILD cuda|cpu: configure the tree (Ninja, Release, shared libraries)
gpu_llama_configure() {
  local src=$1 build=$2 variant=$3 accel
  if [[ $variant == cuda ]]; then
    accel=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)  # Hopper: the H100 and H200 are sm_90
  else
    accel=(-DGGML_CUDA=OFF)
  fi
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAVA_BUILD=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_CCACHE=OFF "${accel[@]}"
}

# gpu_llama_compile BUILD JOBS: the check's targets only
gpu_llama_compile() {
  cmake --build "$1" -j "$2" --target "${GPU_LLAMA_TARGETS[@]}"
}

# gpu_llama_site SRC BUILD SITE: llama-cpp-python as an installed package under SITE (its Python
# files, the built libraries in llama_cpp/lib as the wheel lays them out, and a dist-info that
# names its version), so `import llama_cpp` loads this build
gpu_llama_site() {
  local src=$1 build=$2 site=$3 version
  version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$src/llama_cpp/__init__.py")
  rm -rf "$site/llama_cpp" "$site"/llama_cpp_python-*.dist-info
  mkdir -p "$site" && cp -r "$src/llama_cpp" "$site/llama_cpp" && mkdir -p "$site/llama_cpp/lib"
  find "$build" -name 'lib*.so*' \( -path '*/src/*' -o -path '*/ggml/*' -o -path '*/bin/*' \) \
    ! -path '*/CMakeFiles/*' -exec cp -P {} "$site/llama_cpp/lib/" \;
  [[ -f $site/llama_cpp/lib/libllama.so && -f $site/llama_cpp/lib/libggml.so ]] || { echo "no libllama.so / libggml.so in $build"; return 1; }
  local info="$site/llama_cpp_python-$version.dist-info"
  mkdir -p "$info"
  printf 'Metadata-Version: 2.1\nName: llama_cpp_python\nVersion: %s\n' "$version" > "$info/METADATA"
  printf 'gpu-check\n' > "$info/INSTALLER"
  : > "$info/RECORD"
}

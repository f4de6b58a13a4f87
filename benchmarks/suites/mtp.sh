#!/usr/bin/env bash
# MTP drafting and speculation on hybrid targets, on tiny generated GGUFs of the real architectures
# (tests/tiny_families.py, `predictable` weights: the model counts round blocks of 16 token ids, so
# drafts can be taken; its acceptance says nothing about a trained model's), in one run on this machine:
#  1. tokens per target pass and greedy identity of --method mtp --no-guard against none, on a
#     Qwen3.5-MoE-style hybrid and a GLM-4.5-style MoE with one MTP block each (and ngram, and eagle3
#     with a random tiny head, on the hybrid), over the packaged edit prompts;
#  2. --method ngram against none on a Qwen3-Next-style hybrid (no llama.cpp snapshots: replay);
#  3. the per-step cost of undoing rejected drafts in the recurrent state against a plain step
#     (the host_step suite: chains of 5 whose drafts are all given back, and all taken), for
#     llama.cpp's per-token snapshots (qwen35moe) and a saved state restored and replayed (qwen3next).
# JSON, Markdown and the logs go to OUT (default runs/bench-mtp/). LIMIT prompts of N tokens.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-runs/bench-mtp}"
LIMIT="${LIMIT:-6}"
N="${N:-64}"
STEPS="${STEPS:-150}"
mkdir -p "$OUT/models"
PY=.venv/bin/python
HS=.venv/bin/homespec
$PY - "$OUT/models" <<'EOF'
import sys
from pathlib import Path

sys.path.insert(0, "tests")
from tiny_families import make_family_gguf  # noqa: E402
from tiny_heads import make_head_dir  # noqa: E402

out = Path(sys.argv[1])
for name, family, mtp in (("qwen35moe-mtp", "qwen35moe", 1), ("glm4moe-mtp", "glm4moe", 1), ("qwen3next", "qwen3next", 0)):
    if not (out / f"{name}.gguf").exists():
        make_family_gguf(out / f"{name}.gguf", family, mtp=mtp, predictable=True)
make_head_dir(out / "head")
EOF
M="$OUT/models"
BENCH=(--prompts edit --limit "$LIMIT" -n "$N" --no-guard --threads 2)
$HS bench --model "$M/qwen35moe-mtp.gguf" --methods none,mtp,ngram,eagle3 --draft "$M/head" "${BENCH[@]}" \
  --json-out "$OUT/qwen35moe-mtp.json" --markdown "$OUT/qwen35moe-mtp.md" "$@" | tee "$OUT/qwen35moe-mtp.txt"
$HS bench --model "$M/glm4moe-mtp.gguf" --methods none,mtp "${BENCH[@]}" \
  --json-out "$OUT/glm4moe-mtp.json" --markdown "$OUT/glm4moe-mtp.md" "$@" | tee "$OUT/glm4moe-mtp.txt"
$HS bench --model "$M/qwen3next.gguf" --methods none,ngram "${BENCH[@]}" \
  --json-out "$OUT/qwen3next.json" --markdown "$OUT/qwen3next.md" "$@" | tee "$OUT/qwen3next.txt"
for model in qwen35moe-mtp qwen3next; do
  for accept in none all; do
    $PY -m benchmarks host_step --model "$M/$model.gguf" --shapes plain,chain5 --steps "$STEPS" --rounds 3 \
      --accept "$accept" --json "$OUT/undo-$model-$accept.json" | tee "$OUT/undo-$model-$accept.txt"
  done
done

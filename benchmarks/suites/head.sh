#!/usr/bin/env bash
# The shipped EAGLE-3.1 head on homespec's held-out test prompts, greedy, in one run:
#  1. acceptance with tree drafting (depth 6, top-8, 48 nodes) and tokens/s vs plain on the torch backend;
#  2. the same tree on the GGUF backend (llama.cpp), and the CPU's default shape (a chain of 4);
# every line of each table measured side by side (prompts interleaved). JSON and Markdown go to OUT
# (default runs/bench-head/). Extra arguments pass through to every `homespec bench`, e.g. --draft DIR.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-runs/bench-head}"
LIMIT="${LIMIT:-20}"
N="${N:-64}"
mkdir -p "$OUT"
HS=.venv/bin/homespec
TREE=(--draft-depth 6 --draft-topk 8 --draft-tokens 48)
$HS bench --backend torch --methods none,eagle3 --limit "$LIMIT" -n "$N" --no-guard "${TREE[@]}" \
  --json-out "$OUT/torch-tree.json" --markdown "$OUT/torch-tree.md" "$@"
$HS bench --backend llamacpp --methods none,eagle3 --limit "$LIMIT" -n "$N" --no-guard "${TREE[@]}" \
  --json-out "$OUT/gguf-tree.json" --markdown "$OUT/gguf-tree.md" "$@"
$HS bench --backend llamacpp --methods none,ngram,eagle3 --limit "$LIMIT" -n "$N" \
  --json-out "$OUT/gguf-default.json" --markdown "$OUT/gguf-default.md" "$@"

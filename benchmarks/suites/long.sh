#!/usr/bin/env bash
# Long-context stability of the shipped head on the GGUF backend: prompts of ~512, 1K, 2K, 4K and 8K
# tokens (homespec's own documents, code files and multi-turn histories), greedy, each counter-measure
# switched on in turn, every table measured side by side against plain decoding in the same run:
#   full      EAGLE-3.1 head, full draft attention (--window 0), guard off (the head's own acceptance)
#   window    draft attention limited to the newest 1024 entries + 4 sinks, guard off (the shipped
#             head's default: its training length)
#   guard     the default window, the guard on (falls back to plain decoding when speculation loses)
#   adapt     guard + cost-aware draft depth
# JSON/Markdown go to OUT (default runs/bench-long/). Extra arguments pass through (e.g. --draft DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-runs/bench-long}"
LIMIT="${LIMIT:-10}"
N="${N:-64}"
CTX="${CTX:-8448}"
mkdir -p "$OUT"
HS=.venv/bin/homespec
common=(--long --ctx "$CTX" --limit "$LIMIT" -n "$N")
$HS bench "${common[@]}" --methods none,eagle3 --no-guard --window 0 --json-out "$OUT/full.json" --markdown "$OUT/full.md" "$@"
$HS bench "${common[@]}" --methods none,eagle3 --no-guard --window 1024 --json-out "$OUT/window.json" --markdown "$OUT/window.md" "$@"
$HS bench "${common[@]}" --methods none,eagle3 --guard --json-out "$OUT/guard.json" --markdown "$OUT/guard.md" "$@"
$HS bench "${common[@]}" --methods none,eagle3 --guard --adapt --json-out "$OUT/adapt.json" --markdown "$OUT/adapt.md" "$@"

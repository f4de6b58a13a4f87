#!/usr/bin/env bash
# none vs ngram vs eagle3 on homespec's torch backend, in one run (side by side, prompts interleaved),
# on the held-out test prompts. Extra arguments pass through, e.g. --draft HEAD_DIR --limit 10.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/homespec bench --backend torch --methods none,ngram,eagle3 --limit 10 --max-tokens 64 \
  --draft-depth 4 --draft-topk 1 --draft-tokens 5 "$@"

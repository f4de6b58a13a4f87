#!/usr/bin/env bash
# Reproduces the shipped EAGLE-3.1 draft head for the embedded SmolLM2-135M-Instruct (Q4_1 GGUF),
# in four stages on homespec's own train prompts (8192-token draft vocabulary, 5-step training-time
# test, batches of 2048 positions, seed 0), each stage's data a superset of the one before:
#   1. OUT/base/: self-distilled data to 717,000 reply tokens (50 shards of 64 prompts), a fresh
#      head, lr 1e-3, 2 epochs (1,216 steps) -- the fifth head;
#   2. OUT/stage2/: the data extended to 923,111 reply tokens (65 shards), training warm-started
#      from stage 1's head (`draft train --init`), lr 5e-4, 1 epoch (782 steps) -- the sixth head;
#   3. OUT/stage3/: the data extended to 1,120,000 reply tokens (79 shards), warm-started from
#      stage 2's head, lr 5e-4, 1 epoch (947 steps) -- the seventh head;
#   4. OUT/: the data extended to 1,350,000 reply tokens (96 shards), warm-started from stage 3's
#      head, lr 5e-4, 1 epoch (1,152 steps) -- the shipped head.
# Logs go to each stage's log.txt. Resumable: rerun the same command after an interruption
# (finished shards and the last checkpoint of each stage are kept; a finished stage only re-exports
# its head).
# docs/training.md describes the method and the numbers of a full run.
#
#   bash scripts/train_default_head.sh                 # foreground
#   setsid nohup bash scripts/train_default_head.sh &  # background
#
# One stage instead: INIT=DIR warm-starts from that head, INIT= (empty) starts from a fresh head;
# TOKENS (reply tokens of data: it stops at the first shard boundary past it), EPOCHS and LR (peak
# learning rate) size that stage (defaults: stage 4's). The earlier heads: the seventh is
# INIT=<sixth> TOKENS=1120000, the sixth INIT=<fifth> TOKENS=923111, the fifth INIT= TOKENS=717000
# EPOCHS=2 LR=1e-3; the fourth and third were single from-scratch stages: INIT= TOKENS=540000
# EPOCHS=2 LR=1e-3 (917 steps), INIT= TOKENS=300000 EPOCHS=3 LR=1e-3 (801 steps). More data is what
# raises the head's acceptance further. SKIP_SHARDS=K (one stage only) begins its data at shard K
# (`draft train --skip-shards`): INIT=<the shipped head> SKIP_SHARDS=96 TOKENS=430000 trains on
# prompts the shipped head never saw (docs/training.md: not shipped). KEEP_VOCAB=1 (one stage with
# INIT) keeps the INIT head's draft vocabulary (`draft train --keep-vocab`).
# EAGLE3=1 trains the plain EAGLE-3 twin (fc_norm and norm_output off), for the normalisation A/B.
# FREEZE_LM_HEAD=1 and HIDDEN_WEIGHT=W switch on the trainer's regularisers (off for the shipped
# head); EVAL_EVERY (default 200) is the optimiser steps between held-out acceptance measurements.
# HOMESPEC_TRAIN_THREADS: llama.cpp threads for data generation (default: all cores; on a
# machine shared with other jobs 1 is faster, as busy-waiting threads then stall each other).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-runs/smollm2-head}"
PY="${PYTHON:-.venv/bin/python}"

claim() {  # claim DIR: refuse a DIR that is not new, empty or a training run; mark it one before log.txt
  "$PY" -c 'import sys
from homespec.errors import HomespecError
from homespec.train.rundir import check_out, claim_out
try:
    check_out(sys.argv[1])
    claim_out(sys.argv[1])
except HomespecError as e:
    sys.exit(f"error: {e.message}\nhint: {e.hint}")' "$1"
}

stage() {  # stage OUT TOKENS EPOCHS LR INIT [SKIP_SHARDS [KEEP_VOCAB]]
  claim "$1"
  echo "$(date '+%Y-%m-%d %H:%M:%S') start (pid $$): tokens $2 epochs $3 lr $4 init ${5:-none} skip ${6:-0} keep-vocab ${7:-0}" >> "$1/log.txt"
  OUT="$1" TOKENS="$2" EPOCHS="$3" LR="$4" INIT="$5" SKIP="${6:-0}" THREADS="${HOMESPEC_TRAIN_THREADS:-0}" \
    FREEZE_LM_HEAD="${FREEZE_LM_HEAD:-0}" HIDDEN_WEIGHT="${HIDDEN_WEIGHT:-0}" EVAL_EVERY="${EVAL_EVERY:-200}" \
    EAGLE3="${EAGLE3:-0}" KEEP_VOCAB="${7:-0}" \
    "$PY" - >> "$1/log.txt" 2>&1 <<'PYEOF'
import os

from homespec.embedded import smollm2_path
from homespec.train import TrainConfig, train_head
from homespec.train.progress import LogProgress

threads = int(os.environ["THREADS"]) or None
config = TrainConfig(
    target=str(smollm2_path()),
    out=os.environ["OUT"],
    tokens=int(os.environ["TOKENS"]),
    epochs=int(os.environ["EPOCHS"]),
    draft_vocab=8192,
    ttt_steps=5,
    seed=0,
    max_new_tokens=256,
    parallel=16,
    n_threads=threads,
    batch_tokens=2048,
    lr=float(os.environ["LR"]),
    freeze_lm_head=os.environ["FREEZE_LM_HEAD"] == "1",
    hidden_weight=float(os.environ["HIDDEN_WEIGHT"]),
    eagle3=os.environ["EAGLE3"] == "1",
    eval_prompts=4,
    eval_every=int(os.environ["EVAL_EVERY"]),
    checkpoint_every=20,
    init=os.environ["INIT"] or None,
    skip_shards=int(os.environ["SKIP"]),
    keep_vocab=os.environ["KEEP_VOCAB"] == "1",
)
result = train_head(config, progress=LogProgress(every=25))
print(result, flush=True)
PYEOF
  echo "$(date '+%Y-%m-%d %H:%M:%S') done" >> "$1/log.txt"
}

extend() {  # extend FROM_DIR TO_DIR: TO_DIR's data starts as a copy of FROM_DIR's
  # hard links: shards are never rewritten and the manifest is replaced atomically, so rerunning
  # an earlier stage still finds exactly its own shards
  mkdir -p "$2"
  [[ -e "$2/data" ]] || cp -al "$1/data" "$2/data"
}

if [[ -z "${INIT+set}" ]]; then  # the shipped head: stages 1 to 3 first, then stage 4 below
  stage "$OUT/base" 717000 2 1e-3 ""
  extend "$OUT/base" "$OUT/stage2"
  stage "$OUT/stage2" 923111 1 5e-4 "$OUT/base"
  extend "$OUT/stage2" "$OUT/stage3"
  stage "$OUT/stage3" 1120000 1 5e-4 "$OUT/stage2"
  extend "$OUT/stage3" "$OUT"
  INIT="$OUT/stage3" SKIP_SHARDS=0 KEEP_VOCAB=0
fi
stage "$OUT" "${TOKENS:-1350000}" "${EPOCHS:-1}" "${LR:-5e-4}" "$INIT" "${SKIP_SHARDS:-0}" "${KEEP_VOCAB:-0}"

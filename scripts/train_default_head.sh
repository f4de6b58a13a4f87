#!/usr/bin/env bash
# Reproduces the shipped EAGLE-3.1 draft head for the embedded SmolLM2-135M-Instruct (Q4_1 GGUF):
# self-distilled data (50 shards of 64 prompts: 717,192 reply tokens), 8192-token draft vocabulary,
# 5-step training-time test, batches of 2048 positions, lr 1e-3, 2 epochs (1,216 steps).
# Writes runs/smollm2-head/ (gitignored); logs to runs/smollm2-head/log.txt.
# Resumable: rerun the same command after an interruption (finished shards and the last
# checkpoint are kept). docs/training.md describes the method and the numbers of a full run.
#
#   bash scripts/train_default_head.sh                 # foreground
#   setsid nohup bash scripts/train_default_head.sh &  # background
#
# TOKENS (reply tokens of data, default 717000: data stops at the first shard boundary past it)
# and EPOCHS (default 2) size the run; more data is what raises the head's acceptance further.
# The previous shipped heads: TOKENS=540000 (38 shards, 917 steps); TOKENS=300000 EPOCHS=3 (22 shards, 801 steps).
# EAGLE3=1 trains the plain EAGLE-3 twin (fc_norm and norm_output off), for the normalisation A/B.
# FREEZE_LM_HEAD=1 and HIDDEN_WEIGHT=W switch on the trainer's regularisers (off for the shipped
# head); EVAL_EVERY (default 200) is the optimiser steps between held-out acceptance measurements.
# INIT=DIR starts training from that head's weights (warm start, `draft train --init`); LR (default
# 1e-3) is the peak learning rate.
# HOMESPEC_TRAIN_THREADS: llama.cpp threads for data generation (default: all cores; on a
# machine shared with other jobs 1 is faster, as busy-waiting threads then stall each other).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-runs/smollm2-head}"
mkdir -p "$OUT"
PY="${PYTHON:-.venv/bin/python}"
echo "$(date '+%Y-%m-%d %H:%M:%S') start (pid $$)" >> "$OUT/log.txt"
OUT="$OUT" THREADS="${HOMESPEC_TRAIN_THREADS:-0}" TOKENS="${TOKENS:-717000}" EPOCHS="${EPOCHS:-2}" \
  FREEZE_LM_HEAD="${FREEZE_LM_HEAD:-0}" HIDDEN_WEIGHT="${HIDDEN_WEIGHT:-0}" EVAL_EVERY="${EVAL_EVERY:-200}" \
  EAGLE3="${EAGLE3:-0}" INIT="${INIT:-}" LR="${LR:-1e-3}" \
  "$PY" - >> "$OUT/log.txt" 2>&1 <<'PYEOF'
import os

from homespec.embedded import smollm2_path
from homespec.train import train_head
from homespec.train.progress import LogProgress

threads = int(os.environ["THREADS"]) or None
result = train_head(
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
    progress=LogProgress(every=25),
)
print(result, flush=True)
PYEOF
echo "$(date '+%Y-%m-%d %H:%M:%S') done" >> "$OUT/log.txt"

#!/bin/bash
# host_step on SmolLM2 and on --tiny (a random-weight target of SmolLM2's vocabulary, 8 layers of 64, and a head
# of its width), alternating round by round, the head's drafts and the oracle's fully accepted ones:
#   bash docs/results/2026-12-07/llamacpp/host-step/alternate-tiny.sh STEPS ROUNDS
cd "$(dirname "$0")/../../../../.." || exit 1
steps=${1:-150}; rounds=${2:-3}
for r in $(seq "$rounds"); do
  for target in smollm2 tiny; do
    more=(); [ "$target" = tiny ] && more=(--tiny)
    for drafter in "head" "oracle --accept all"; do
      echo "== round $r, $target, --drafter $drafter"
      # shellcheck disable=SC2086
      .venv/bin/python -m benchmarks host_step --shapes chain5,tree48 --drafter $drafter --steps "$steps" \
        --rounds 1 --no-json "${more[@]}" 2>&1 | grep -E "^round|tokens/step"
    done
  done
done

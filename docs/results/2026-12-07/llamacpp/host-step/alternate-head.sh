#!/bin/bash
# alternate a worktree of the previous commit (/tmp/wt_head: git worktree add /tmp/wt_head 496ea3d) and this checkout: tree48 head host_step
R=${1:-3}; STEPS=${2:-60}
for rep in $(seq $R); do
  for v in old new; do
    if [ $v = old ]; then d=/tmp/wt_head; else d=/work/main; fi
    echo -n "$v: "
    (cd $d && PYTHONPATH=. /work/main/.venv/bin/python -m benchmarks host_step --shapes tree48 --drafter head --steps $STEPS --rounds 1 --json /dev/null 2>&1 | grep -o "host.*tokens/step" | sed 's/recurrent state: save [0-9.]* ms, undo [0-9.]* ms; //')
  done
done

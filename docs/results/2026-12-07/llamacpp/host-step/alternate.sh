#!/bin/bash
# alternate old (HEAD checkout + old lib) and new (working tree + new lib) host_step runs
N=$1; shift
for rep in 1 2 3; do
  for v in old new; do
    if [ $v = old ]; then d=/tmp/wt_old; lib=/tmp/libs/olddir; else d=/work/main; lib=${NEWLIB:-/tmp/libs/newdir}; fi
    echo -n "$v n_ctx=$N: "
    (cd $d && LLAMA_CPP_LIB_PATH=$lib PYTHONPATH=. /work/main/.venv/bin/python /tmp/ctx_scale.py $N "$@" 2>&1 | tail -1 | grep -o "host.*tokens/step" | sed 's/recurrent state: save [0-9.]* ms, undo [0-9.]* ms; //')
  done
done

"""Time llama.cpp's sequence bookkeeping (llama_memory_seq_cp + llama_memory_seq_rm over a tree's positions)
on the embedded SmolLM2 for several context sizes and used cells. Run once per library build:

    LLAMA_CPP_LIB_PATH=<dir of libllama.so> .venv/bin/python seq_ops.py
"""

import time

import numpy as np

from homespec.backends.llamacpp.backend import LlamaCppBackend
from homespec.backends.settings import BackendSettings
from homespec.embedded import smollm2_path

REPS = 2000
for n_ctx, used in ((1024, 300), (8192, 300), (32768, 300), (32768, 8000)):
    be = LlamaCppBackend(str(smollm2_path()), BackendSettings(n_ctx=n_ctx, n_threads=2), max_leaves=8)
    be.prefill(list(np.random.default_rng(0).integers(100, 20000, used)))
    ll, mem, p0 = be._ll, be._mem, used - 8
    t0 = time.perf_counter()
    for _ in range(REPS):  # what a tree's bookkeeping does per id: copy the last cells into an id, clear them again
        ll.llama_memory_seq_cp(mem, 0, 1, p0, -1)
        ll.llama_memory_seq_rm(mem, 1, p0, -1)
    dt = (time.perf_counter() - t0) / (2 * REPS)
    print(f"n_ctx {n_ctx:6d}, {used:5d} cells used: {dt * 1e6:6.2f} us per seq_cp / seq_rm call")
    be.close()

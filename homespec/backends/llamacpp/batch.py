"""Rows into a llama_batch, and one llama_decode call: what every llama.cpp decoder here does.

A row is (token, position, sequence ids, want logits). Used by the two llama.cpp backends
(backends/llamacpp/core.py) and the batched target of training data and calibration
(backends/llamacpp/batched.py).
"""

from __future__ import annotations

from typing import Any, Sequence

from homespec.backends.llamacpp.lib import LogCollector, capture_log, reason
from homespec.errors import HomespecError

Row = tuple[int, int, tuple[int, ...], bool]  # (token, position, sequence ids, want logits)


def fill_batch(b: Any, rows: Sequence[Row]) -> int:
    """Write (token, position, sequence ids, want logits) rows into llama_batch `b`.
    -> how many rows ask for logits."""
    n_out = 0
    for i, (tok, pos, seqs, want) in enumerate(rows):
        b.token[i], b.pos[i], b.n_seq_id[i] = tok, pos, len(seqs)
        for j, s in enumerate(seqs):
            b.seq_id[i][j] = s
        b.logits[i] = 1 if want else 0
        n_out += bool(want)
    b.n_tokens = len(rows)
    return n_out


def run_decode(ll: Any, ctx: Any, b: Any, log: LogCollector, hint: str) -> None:
    """One llama_decode call; a non-zero code becomes a HomespecError with llama.cpp's reason."""
    with capture_log(log):
        rc = ll.llama_decode(ctx, b)
    if rc != 0:
        raise HomespecError(f"llama_decode failed (code {rc}): {reason(log, 'see HOMESPEC_LLAMA_LOG=1 output')}",
                            hint=hint)


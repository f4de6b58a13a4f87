"""Rows into a llama_batch, and one llama_decode call: what every llama.cpp decoder here does.

A row is (token, position, sequence ids, want logits). The two llama.cpp backends
(backends/llamacpp/core.py) fill a `Batch`, whose arrays numpy owns, with a few slice assignments, and
the draft heads one whose rows also carry an input row (backends/llamacpp/head.py); `fill_batch` writes
a batch from llama_batch_init row by row through ctypes (the batched target of training data and
calibration, backends/llamacpp/batched.py, and the head check, heads/llamacpp_draft.py).
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np

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


class Batch:
    """A llama_batch of at most `n_rows` rows, each in at most `n_seq` sequences, over numpy arrays;
    with `embd` > 0 each row also carries an input row of that width (the draft heads' decoder reads
    a token and a row; `tokens=False`: rows only, the eagle3 encoder's input).

    llama_batch_init's arrays are reachable only through ctypes pointers, so writing a row costs
    a ctypes store per field (and per sequence id): ~5 us a row, 0.2 ms for a 48-node tree and
    more than a millisecond for a 512-token prompt chunk (docs/backends.md, "Host work per step").
    Here the struct points into arrays numpy owns (the sequence ids one [n_rows, n_seq] block), so
    a batch is a handful of slice assignments. Freed with this object: never llama_batch_free."""

    def __init__(self, ll: Any, n_rows: int, n_seq: int, *, embd: int = 0, tokens: bool = True) -> None:
        self.n_rows = n_rows
        self.token = np.zeros(n_rows, np.int32)  # unread by llama.cpp where tokens=False (the struct has none)
        self.pos = np.zeros(n_rows, np.int32)
        self.n_seq_id = np.zeros(n_rows, np.int32)
        self.seq = np.zeros((n_rows, n_seq), np.int32)  # [rows, n_seq]: row i's ids, as seq_id[i] points
        self.logits = np.zeros(n_rows, np.int8)
        self.embd = np.zeros((n_rows, embd), np.float32) if embd else None  # [rows, width], C order
        i32 = ctypes.POINTER(ctypes.c_int32)
        base, stride = self.seq.ctypes.data, self.seq.strides[0]
        self._rows = (i32 * (n_rows + 1))(*(ctypes.cast(base + i * stride, i32) for i in range(n_rows)))
        f32 = ctypes.POINTER(ctypes.c_float)
        self.c = ll.llama_batch(n_tokens=0, token=self._ptr(self.token, i32) if tokens else None,
                                embd=self._ptr(self.embd, f32) if embd else None,
                                pos=self._ptr(self.pos, i32), n_seq_id=self._ptr(self.n_seq_id, i32),
                                seq_id=ctypes.cast(self._rows, ctypes.POINTER(i32)),
                                logits=self._ptr(self.logits, ctypes.POINTER(ctypes.c_int8)))

    @staticmethod
    def _ptr(a: np.ndarray, kind: Any) -> Any:
        return ctypes.cast(a.ctypes.data, kind)

    def fill(self, rows: Sequence[Row]) -> int:
        """Write the rows (at most n_rows). -> how many ask for logits."""
        n = len(rows)
        if n == 1 and len(rows[0][2]) == 1:  # a plain step's root: scalar stores beat slicing
            (token, pos, (seq,), want), = rows
            self.token[0], self.pos[0], self.n_seq_id[0], self.seq[0, 0], self.logits[0] = token, pos, 1, seq, want
            self.c.n_tokens = 1
            return int(bool(want))
        token, pos, seqs, want = zip(*rows)
        self.token[:n] = token
        self.pos[:n] = pos
        self.logits[:n] = want
        widths = [len(s) for s in seqs]
        self.n_seq_id[:n] = widths
        if max(widths) == 1:  # a prompt, a chain, several lanes' roots: one id a row
            self.seq[:n, 0] = [s[0] for s in seqs]
        else:
            for i, s in enumerate(seqs):
                self.seq[i, :len(s)] = s
        self.c.n_tokens = n
        return sum(map(bool, want))

    def put(self, n: int, *, pos: Any, seq: Any, want: bool, token: Any = None, embd: Any = None) -> None:
        """n rows at once, each field an array of n or one value for all: `seq` a tuple of the ids
        every row is in, or an array of one id a row; `embd` [n, width] rows (this batch's width)."""
        if n > self.n_rows:
            raise HomespecError(f"{n} rows into a batch of {self.n_rows}", hint="split the call")
        if token is not None:
            self.token[:n] = token
        if embd is not None:
            self.embd[:n] = embd
        self.pos[:n] = pos
        self.logits[:n] = want
        if isinstance(seq, tuple):
            self.n_seq_id[:n] = len(seq)
            self.seq[:n, :len(seq)] = seq
        else:
            self.n_seq_id[:n] = 1
            self.seq[:n, 0] = seq
        self.c.n_tokens = n


def run_decode(ll: Any, ctx: Any, b: Any, log: LogCollector, hint: str) -> None:
    """One llama_decode call; a non-zero code becomes a HomespecError with llama.cpp's reason."""
    with capture_log(log):
        rc = ll.llama_decode(ctx, b)
    if rc != 0:
        raise HomespecError(f"llama_decode failed (code {rc}): {reason(log, 'see HOMESPEC_LLAMA_LOG=1 output')}",
                            hint=hint)


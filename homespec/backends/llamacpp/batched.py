"""The target model as the data generator sees it: many sequences decoded together.

`BatchedLlamaTarget` drives llama.cpp's low-level API with one context whose KV cache holds
up to `n_parallel` sequences. One llama_decode call advances every active sequence, and
returns, for every row of the batch, what training needs:

* the inputs of the head's three target layers (llama.cpp's per-layer input extraction, or the
  eval-callback fallback, both from homespec.backends.llamacpp.features);
* the final normed hidden state (`result_norm`, the input of the output matrix), read as the
  context's embeddings: with `embeddings=True` and no pooling llama.cpp copies that tensor out
  for every row that also produces logits;
* the greedy next token of the rows that end a sequence's batch slice.

A decode of many rows costs far less than as many one-row decodes (docs/training.md, "Speed",
has the measured rates), so decoding 8-16 sequences at once is the cheapest way to make data.

Imported lazily (by homespec.train.data, and by the EAGLE-3 twin's calibration,
homespec.backends.llamacpp.head_twin).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from homespec.backends.llamacpp.amx import model_params
from homespec.backends.llamacpp.batch import fill_batch, run_decode
from homespec.backends.llamacpp.features import EvalCallbackCapture, LayerInputCapture
from homespec.backends.llamacpp.lib import (
    LogCollector, capture_log, free_handles, import_llama_cpp, layer_inp_entry_points, reason,
)
from homespec.errors import FormatError, HomespecError


@dataclass(frozen=True, slots=True)
class Row:
    token: int
    pos: int
    seq: int


@dataclass(frozen=True, slots=True)
class DecodeOut:
    features: np.ndarray  # [n_rows, 3*H] float32, batch order
    hidden: np.ndarray  # [n_rows, H] float32: result_norm of every row
    next_tokens: dict[int, int]  # seq -> greedy token after that sequence's last row


class BatchedLlamaTarget:
    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        feature_layers: Sequence[int],
        n_parallel: int = 16,
        n_ctx: int = 8192,
        n_batch: int = 512,
        n_threads: int | None = None,
    ) -> None:
        path = os.fspath(model_path)
        self._ll = ll = import_llama_cpp()
        self._log = LogCollector()
        self._model = self._ctx = self._batch = None
        with capture_log(self._log):
            mp = model_params(ll)
            mp.n_gpu_layers = 0
            self._model = ll.llama_model_load_from_file(path.encode(), mp)
            if not self._model:
                raise FormatError(f"llama.cpp could not load {path}: {reason(self._log, 'unknown reason')}",
                                  hint="pass a complete GGUF file as --target")
            self.n_layer = ll.llama_model_n_layer(self._model)
            self.n_embd = ll.llama_model_n_embd(self._model)
            self.n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self._model))
            entry = layer_inp_entry_points(ll)
            self._capture: LayerInputCapture | EvalCallbackCapture = (
                LayerInputCapture(entry, self.n_layer, self.n_embd) if entry is not None
                else EvalCallbackCapture(ll, self.n_layer, self.n_embd)
            )
            cp = ll.llama_context_default_params()
            cp.n_ctx = n_ctx
            cp.n_batch = cp.n_ubatch = n_batch
            cp.n_seq_max = n_parallel
            # one KV stream per sequence (n_ctx / n_parallel cells each): every token belongs to
            # one sequence, and attention then scans only its own sequence's cells. A unified
            # buffer makes each row attend over all sequences' cells (masked): slower per step
            # (docs/training.md, "Speed"), and worse as replies grow.
            cp.kv_unified = False
            cp.n_threads = cp.n_threads_batch = n_threads or os.cpu_count() or 1
            # embeddings without pooling = result_norm per output row, next to the logits
            cp.embeddings = True
            cp.pooling_type = ll.LLAMA_POOLING_TYPE_NONE
            cp.no_perf = True
            if isinstance(self._capture, EvalCallbackCapture):
                cp.cb_eval = self._capture.callback
            self._ctx = ll.llama_init_from_model(self._model, cp)
            if not self._ctx:
                raise HomespecError(f"llama.cpp could not create a context: {reason(self._log, 'unknown reason')}",
                                    hint="lower --parallel or the context size")
        if isinstance(self._capture, LayerInputCapture):
            self._capture.ctx = self._ctx
        self._capture.set_layers(feature_layers)
        self.n_ctx = ll.llama_n_ctx(self._ctx)
        self.n_parallel = n_parallel
        self._n_batch = n_batch
        self._batch = ll.llama_batch_init(n_batch, 0, 1)
        self._mem = ll.llama_get_memory(self._ctx)

    def decode(self, rows: Sequence[Row]) -> DecodeOut:
        """Decode rows (any mix of sequences, positions ascending per sequence) in n_batch chunks."""
        ll, b, H = self._ll, self._batch, self.n_embd
        feats, hidden = [], []
        last_row = {r.seq: i for i, r in enumerate(rows)}  # the row whose logits pick the next token
        next_tokens: dict[int, int] = {}
        for start in range(0, len(rows), self._n_batch):
            chunk = rows[start : start + self._n_batch]
            # logits for every row: its result_norm is a training target
            fill_batch(b, [(r.token, r.pos, (r.seq,), True) for r in chunk])
            self._capture.begin()
            run_decode(ll, self._ctx, b, self._log,
                       hint="code 1 means the KV cache is full: lower --parallel or --max-new-tokens")
            feats.append(self._capture.collect(len(chunk)))
            emb = ll.llama_get_embeddings(self._ctx)
            hidden.append(np.ctypeslib.as_array(emb, shape=(len(chunk), H)).copy())  # [n, H]
            for i, r in enumerate(chunk):
                if last_row[r.seq] == start + i:
                    logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self._ctx, i), shape=(self.n_vocab,))
                    next_tokens[r.seq] = int(np.argmax(logits))
        return DecodeOut(np.concatenate(feats, 0), np.concatenate(hidden, 0), next_tokens)

    def drop(self, seq: int, from_pos: int = 0) -> None:
        """Forget sequence `seq` from position `from_pos` on."""
        self._ll.llama_memory_seq_rm(self._mem, seq, from_pos, -1)

    def clear(self) -> None:
        self._ll.llama_memory_clear(self._mem, True)

    def close(self) -> None:
        free_handles(self)

    def __enter__(self) -> "BatchedLlamaTarget":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""What both llama.cpp backends share: one model and one context, and rows decoded through them.

`LlamaCppBackend` (backend.py: one sequence and its draft trees) and `MultiSeqBackend`
(multi.py: many sequences in one context) differ in how they lay sequence ids out and keep
positions; loading the model and the context, the shape drafters read, decoding rows in n_batch
slices, llama.cpp's buffer sizes and teardown are the same code, here.

Imported lazily (homespec plan never imports it); llama_cpp itself is imported in _open().
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np
import torch

from homespec.backends.llamacpp.batch import Row, fill_batch, run_decode
from homespec.backends.llamacpp.features import LayerInputCapture
from homespec.backends.llamacpp.lib import (
    LogCollector,
    capture_log,
    free_handles,
    import_llama_cpp,
    parse_buffer_lines,
    tally_buffers,
)
from homespec.backends.llamacpp.load import choose_capture, flash_attn_active, load_model, new_context, token_embd
from homespec.backends.llamacpp.tokenizer import LlamaCppTokenizer
from homespec.backends.settings import BackendSettings
from homespec.contracts.backend import MemoryReport, Tokenizer
from homespec.errors import HomespecError

class LlamaCppCore:
    """A loaded GGUF model with one llama_context and a batch of n_batch rows."""

    name = "llamacpp"
    device = "cpu"  # tensors handed out live on the host, whatever device llama.cpp computes on
    _kv_full_hint = "code 1 means the KV cache is full: a larger --ctx helps"

    def _open(self, model_path: str | os.PathLike[str], settings: BackendSettings, *, n_seq: int,
              seq_per_row: int, feature_capture: str = "auto", unified: bool = True) -> None:
        """Load the model and a context of `n_seq` sequence ids; a batch row carries at most
        `seq_per_row` of them."""
        path = os.fspath(model_path)
        if not os.path.isfile(path):
            raise HomespecError(f"model file not found: {path}", hint="check the path, or run `homespec plan` to pick a model")
        self._ll = ll = import_llama_cpp()
        self.model_path, self.settings = path, settings
        self._log = LogCollector()
        self._model = self._ctx = self._batch = None
        self._tokenizer: Tokenizer | None = None
        self._embd_table: torch.Tensor | None = None
        with capture_log(self._log):
            self._model = load_model(ll, path, settings, self._log)
            self._n_layer = ll.llama_model_n_layer(self._model)
            self._n_embd = ll.llama_model_n_embd(self._model)
            self.n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self._model))
            # a sliding-window cache keeps only the last n_swa positions: a cut prefix is usable
            # only while its window's cells are still there (trim)
            self.n_swa = int(ll.llama_model_n_swa(self._model))
            # a recurrent state (hybrid models) cannot be cut back: prompt reuse resumes from
            # checkpoints instead (backends/llamacpp/state.py)
            self.recurrent = bool(ll.llama_model_is_recurrent(self._model) or ll.llama_model_is_hybrid(self._model))
            self.swa_full = False  # the window alone, as planned (new_context)
            self._capture = choose_capture(ll, feature_capture, self._n_layer, self._n_embd)
            try:
                self._ctx = new_context(ll, self._model, settings, n_seq, self._capture, self._log, path,
                                        unified=unified)
            except HomespecError:
                ll.llama_model_free(self._model)
                self._model = None
                raise
        if isinstance(self._capture, LayerInputCapture):
            self._capture.ctx = self._ctx
        self.flash_attn_active = flash_attn_active(settings, self._log.lines)
        # llama.cpp clamps n_batch to n_ctx for a decoder; a larger llama_decode call would abort
        self._batch_cap = min(settings.n_batch, ll.llama_n_batch(self._ctx))
        self._batch = ll.llama_batch_init(self._batch_cap, 0, seq_per_row)
        self._mem = ll.llama_get_memory(self._ctx)

    # --- shape (what drafters read) ------------------------------------------------------------

    @property
    def n_layer(self) -> int:
        return self._n_layer

    @property
    def hidden_size(self) -> int:
        return self._n_embd

    @property
    def batch_rows(self) -> int:
        """The most rows one llama_decode call takes (n_batch)."""
        return self._batch_cap

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self._capture.layers

    @property
    def feature_capture(self) -> str:
        return self._capture.kind

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            self._tokenizer = LlamaCppTokenizer(self.model_path)
        return self._tokenizer

    def set_feature_layers(self, layers: Sequence[int]) -> None:
        self._capture.set_layers(layers)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Token embeddings [..., H] float32: llama.cpp's `inp_embd` rows, rounded to fp16 (the
        host copy the planner budgets)."""
        if self._embd_table is None:
            self._embd_table = token_embd(self.model_path)  # [V, H] float16, dequantised once
        return self._embd_table[tokens.long()].float()

    # --- decoding ------------------------------------------------------------------------------

    def _decode_rows(self, rows: Sequence[Row]) -> tuple[np.ndarray, np.ndarray | None, list[int]]:
        """Decode rows in slices of n_batch. -> logits [n_out, V] float32, features [n_rows, k*H]
        float32 or None, and for each row the index of its logits row (-1 without)."""
        V = self.n_vocab
        logit_parts: list[np.ndarray] = []
        feat_parts: list[np.ndarray] = []
        out_index: list[int] = []
        n_seen = 0  # logits rows so far: llama.cpp returns one per row that asks, in row order
        for start in range(0, len(rows), self._batch_cap):
            chunk = rows[start:start + self._batch_cap]
            n_out = fill_batch(self._batch, chunk)
            for *_, want in chunk:
                out_index.append(n_seen if want else -1)
                n_seen += bool(want)
            self._capture.begin()
            run_decode(self._ll, self._ctx, self._batch, self._log, self._kv_full_hint)
            if n_out:
                ptr = self._ll.llama_get_logits(self._ctx)
                logit_parts.append(np.ctypeslib.as_array(ptr, shape=(n_out, V)).copy())
            feats = self._capture.collect(len(chunk))
            if feats is not None:
                feat_parts.append(feats)
        if len(logit_parts) == 1:  # one slice (every decode step): its copy is already ours
            logits = logit_parts[0]
        else:
            logits = np.concatenate(logit_parts, axis=0) if logit_parts else np.empty((0, V), np.float32)
        return logits, (np.concatenate(feat_parts, axis=0) if feat_parts else None), out_index

    # --- memory and teardown -------------------------------------------------------------------

    def memory_report(self) -> MemoryReport:
        """llama.cpp's own buffer sizes, from the lines it logged while loading (and since)."""
        t = tally_buffers(parse_buffer_lines(self._log.lines))
        detail = {f"{kind}:{buf}": v for kind, bufs in t.items() for buf, v in bufs.items()}
        devices = [buf for bufs in t.values() for buf in bufs if not buf.startswith("CPU")]
        return MemoryReport(
            weights_bytes=sum(t["model"].values()),
            kv_bytes=sum(t["KV"].values()),
            compute_bytes=sum(t["compute"].values()) + sum(t["output"].values()),
            device=devices[0] if devices else "CPU",
            detail=detail,
        )

    def close(self) -> None:
        free_handles(self)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def as_tensor(a: np.ndarray | None) -> torch.Tensor | None:
    return None if a is None else torch.from_numpy(np.ascontiguousarray(a))

"""What both llama.cpp backends share: one model and one context, and rows decoded through them.

`LlamaCppBackend` (backend.py: one sequence and its draft trees) and `MultiSeqBackend`
(multi.py: many sequences in one context) differ in how they lay sequence ids out and keep
positions; loading the model and the context, the shape drafters read, decoding rows in n_batch
slices, llama.cpp's buffer sizes and teardown are the same code, here.

Imported lazily (homespec plan never imports it); llama_cpp itself is imported in _open().
"""

from __future__ import annotations

import os
import time
from typing import Any, Sequence

import numpy as np

from homespec.backends.llamacpp import exports
from homespec.backends.llamacpp.batch import Batch, Row, run_decode
from homespec.backends.llamacpp.features import LayerInputCapture, NextnCapture
from homespec.backends.llamacpp.lib import (
    Held,
    HostRows,
    LogCollector,
    address_getter,
    capture_log,
    free_handles,
    import_llama_cpp,
    memory_report,
)
from homespec.backends.llamacpp.load import choose_capture, flash_attn_active, load_model, new_context, token_embd
from homespec.backends.llamacpp.rollback import Snapshots, rollback_mode
from homespec.backends.llamacpp.threads import ThreadTuner
from homespec.backends.llamacpp.tokenizer import LlamaCppTokenizer
from homespec.backends.settings import BackendSettings
from homespec.contracts.backend import MemoryReport, Tokenizer
from homespec.errors import HomespecError

class LlamaCppCore:
    """A loaded GGUF model with one llama_context and a batch of n_batch rows."""

    name = "llamacpp"
    device = "cpu"  # arrays handed out live on the host, whatever device llama.cpp computes on
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
        self._model = self._ctx = None
        self._tokenizer: Tokenizer | None = None
        self._embd_table: np.ndarray | None = None
        with capture_log(self._log, load=True):
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
        self._batch_arrays = Batch(ll, self._batch_cap, seq_per_row)
        # each decode's thread count, measured against the machine's load (backends/llamacpp/threads.py)
        self._threads = ThreadTuner(int(ll.llama_n_threads(self._ctx)), fixed=not settings.adapt_threads)
        self._threads_now = self._threads.n_threads
        self._logit_rows = HostRows(self.n_vocab)
        self._logits_at = address_getter(exports.llama_library(), "llama_get_logits")
        self._mem = ll.llama_get_memory(self._ctx)
        self._keep_native = None if self.recurrent else exports.keep_path_entry_point()  # None: seq_rm / seq_cp calls
        self._id_arrays: dict[tuple[int, ...], Held] = {}  # _id_array's
        # how rejected draft tokens leave a recurrent state (backends/llamacpp/rollback.py)
        self.rollback_mode = rollback_mode(self)
        self._snapshots = Snapshots()
        self._dependents: list = []  # contexts on this model (its MTP layers'): closed before it

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
        if isinstance(self._capture, NextnCapture):  # back from an MTP drafter's capture (bench)
            self._capture.stop()
            self._capture = self._layer_capture
        self._capture.set_layers(layers)

    def capture_nextn(self) -> None:
        """Hand out each row's last hidden state as its features (what MTP layers read): before the
        first prefill, instead of chosen layers' inputs (set_feature_layers goes back to those)."""
        from llama_cpp import llama_cpp_ext

        if not self.settings.load_mtp:
            raise HomespecError("the target was loaded without its MTP layers",
                                hint="load it with load_mtp (--method mtp does)")
        if not isinstance(self._capture, NextnCapture):
            self._capture.set_layers(())
            self._layer_capture = self._capture
            self._capture = NextnCapture(llama_cpp_ext, self._ctx, self._n_embd)

    def attach(self, dependent: object) -> None:
        """A context made on this model (its MTP layers' own): closed before the model is freed."""
        self._dependents.append(dependent)

    def token_embeddings(self) -> np.ndarray:
        """The token embedding table [V, H] float16 on the host, dequantised once: llama.cpp's
        `inp_embd` rows rounded to fp16 (the host copy the planner budgets), for a draft head
        that runs outside llama.cpp (homespec.nets.eagle3_drafter). Nothing reads it to decode."""
        if self._embd_table is None:
            self._embd_table = token_embd(self.model_path)
        return self._embd_table

    # --- decoding ------------------------------------------------------------------------------

    def _decode_rows(self, rows: Sequence[Row], *, logit_order: Sequence[int] | np.ndarray | None = None,
                     row_order: Sequence[int] | np.ndarray | None = None, view: bool = False,
                     lazy_features: bool = False) -> tuple[np.ndarray, Any, list[int]]:
        """Decode rows in slices of n_batch. -> logits, features and, for each row, the index of its
        logits row among the rows that asked for one (-1 without).

        logits: [n_out, V] float32, the rows that asked in row order, or the logits rows
        `logit_order` names in that order; features: [n_rows, k*H] float32 or None, in row order
        or `row_order`'s. Both are gathered straight out of llama.cpp's buffers, one copy each
        (the next decode overwrites them), already in the order the caller hands out. `view`: logits
        already in that order (a plain step's row, a chain's) are handed out as a view of
        llama.cpp's buffer, not copied: valid only until the next decode, for a caller that reads
        them first (the engine's step); `lazy_features`: likewise the features, as FeatureRows
        gathered when read (one lane's tree, whose drafter reads its accepted nodes' rows alone)."""
        n_rows = len(rows)
        out_index = logit_index(rows)
        if n_rows <= self._batch_cap:  # one slice: every decode step, a prompt of up to n_batch tokens
            n_out = self._decode_slice(rows)
            if lazy_features and row_order is not None and hasattr(self._capture, "rows"):
                feats = self._capture.rows(n_rows, row_order)  # gathered when read, before the next decode
            else:
                feats = self._capture.collect(n_rows, row_order)
            return self._logits(n_out, logit_order, view), feats, out_index
        logit_parts: list[np.ndarray] = []
        feat_parts: list[np.ndarray] = []
        for start in range(0, n_rows, self._batch_cap):
            chunk = rows[start:start + self._batch_cap]
            n_out = self._decode_slice(chunk)
            if n_out:
                logit_parts.append(self._logits(n_out, None))
            feats = self._capture.collect(len(chunk))
            if feats is not None:
                feat_parts.append(feats)
        logits = np.concatenate(logit_parts, axis=0) if logit_parts else np.empty((0, self.n_vocab), np.float32)
        feats = np.concatenate(feat_parts, axis=0) if feat_parts else None
        if logit_order is not None:
            logits = logits[np.asarray(logit_order, dtype=np.intp)]
        if feats is not None and row_order is not None:
            feats = feats[np.asarray(row_order, dtype=np.intp)]
        return logits, feats, out_index

    def _decode_slice(self, rows: Sequence[Row]) -> int:
        """One llama_decode of at most n_batch rows. -> how many rows asked for logits."""
        n_out = self._batch_arrays.fill(rows)
        self._capture.begin()
        n_threads = self._threads.pick(len(rows))
        if n_threads != self._threads_now:
            self._ll.llama_set_n_threads(self._ctx, n_threads, n_threads)
            self._threads_now = n_threads
        t0 = time.perf_counter()
        run_decode(self._ll, self._ctx, self._batch_arrays.c, self._log, self._kv_full_hint)
        self._threads.record(len(rows), n_threads, time.perf_counter() - t0)
        return n_out

    def _logits(self, n_out: int, order: Sequence[int] | np.ndarray | None, view: bool = False) -> np.ndarray:
        """The last decode's logits rows (all n_out, or `order`'s), copied out of llama.cpp's buffer
        (`view`: not copied where they are in order already). Right after llama_decode the copy is
        the dearest host work of a plain step: 49,152 floats read and written from caches the
        decode's weights just filled (~0.1 ms of the ~0.35 ms on this CPU)."""
        if not n_out:
            return np.empty((0, self.n_vocab), np.float32)
        buf = self._logit_rows.rows_at(self._logits_at(self._ctx), n_out)  # [n_out, V], a view
        if view and (order is None or _in_order(order, n_out)):
            return buf
        return buf.copy() if order is None else buf[np.asarray(order, dtype=np.intp)]  # one gather

    # --- a verified tree's kept path ------------------------------------------------------------

    def _keep_path(self, seq: int, ids: Sequence[int], p0: int, k: int, *, tree: Sequence[int],
                   below: Sequence[int], alone: bool) -> None:
        """After a tree verified from position p0: sequence `seq` holds the context and its
        root-to-leaf path, whose first k nodes stay. `ids`: the ids each committed cell carries;
        `tree`: those the tree's rows carried (its leaves'); `below`: the leaves' ids under the last
        kept node (`seq` among them), which hold the kept nodes already and lose only what lies past
        them; every other tree id loses the tree's cells (the rejected branches are freed), then the
        k kept cells join every id that lacks them. `alone`: one sequence's context, where nothing but
        the tree lies past the committed cells (one call cuts it for every id). At most 2 x ids calls
        over the tree's own positions, whatever the context's length (re-tagging the context instead
        cost ids x context cells of llama.cpp's bookkeeping a step; docs/backends.md, "Tree
        verification in one pass"); fewer the fewer leaves lie outside the kept path. With homespec's
        patch, one call does it (llama_homespec_keep_path: the cells of the tree's ids from p0 on, kept
        or freed by the same rule)."""
        if self._native_keep(seq, ids, p0, k, tree, in_order=False):  # homespec's patch: the same in one call
            return
        ll, mem = self._ll, self._mem
        stay, in_tree = set(below), set(tree)
        if alone:
            ll.llama_memory_seq_rm(mem, -1, p0 + k, -1)
        else:
            for s in stay:
                ll.llama_memory_seq_rm(mem, s, p0 + k, -1)
        for s in ids:
            if s in stay:
                continue
            if s in in_tree:  # a branch the walk left: its cells go, the kept ones come
                ll.llama_memory_seq_rm(mem, s, p0, -1)
            ll.llama_memory_seq_cp(mem, seq, s, p0, p0 + k)  # an id from an earlier, wider tree holds none of this one

    def _keep_in_order(self, seq: int, ids: Sequence[int], p0: int, k: int, tree: Sequence[int]) -> bool:
        """Keep the first k nodes of the path `seq` holds as _keep_path does, moving those past a hole in cell
        order into the tree's lowest cells (their K and V rows, on the device) where homespec's patch can:
        what re-decoding them after the cut gives flash attention, without a pass. -> done (False: nothing
        changed; the caller cuts at the hole and decodes the rest again)."""
        return self._native_keep(seq, ids, p0, k, tree, in_order=True)

    def _native_keep(self, seq: int, ids: Sequence[int], p0: int, k: int, tree: Sequence[int], *,
                     in_order: bool) -> bool:
        """llama_homespec_keep_path (homespec's patch: one call, from the cache's position index). -> done"""
        if self._keep_native is None:
            return False
        # both held here through the call: looking up the second may clear a full cache of the first
        t, c = self._id_array(tree), self._id_array(ids)
        return not self._keep_native(self._ctx, seq, p0, p0 + k, t.addr, len(t.a), c.addr, len(c.a), int(in_order))

    def _id_array(self, ids: Sequence[int]) -> Held:
        """Sequence ids as an int32 array a patch entry point reads, with its address, made once per set (a
        lane's trees and committed ids recur step after step; numpy's `.ctypes` is Python code whose first
        use after a decode costs tens of microseconds: docs/backends.md). The caller holds it through the
        call: the cache drops every set when it reaches 256."""
        key = tuple(ids)
        held = self._id_arrays.get(key)
        if held is None:
            if len(self._id_arrays) >= 256:
                self._id_arrays.clear()
            held = self._id_arrays[key] = Held(np.asarray(key, dtype=np.int32))
        return held

    # --- memory and teardown -------------------------------------------------------------------

    def memory_report(self) -> MemoryReport:
        """llama.cpp's own buffer sizes, from the lines it logged while loading (and since)."""
        return memory_report(self._log)

    def close(self) -> None:
        for d in reversed(getattr(self, "_dependents", ())):
            d.close()
        free_handles(self)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def _in_order(order: Sequence[int] | np.ndarray, n: int) -> bool:
    """Is `order` 0, 1, ..., n-1 (the rows as llama.cpp returned them)?"""
    return len(order) == n and all(int(j) == i for i, j in enumerate(order))


def logit_index(rows: Sequence[Row]) -> list[int]:
    """For each row, the index of its logits row (-1 without): llama.cpp returns one logits row
    per row that asks, in row order."""
    out, n_seen = [], 0
    for *_, want in rows:
        out.append(n_seen if want else -1)
        n_seen += bool(want)
    return out

"""llama.cpp's own eagle3 drafter, driven from Python: the check that an exported GGUF drafts what
homespec's head drafts.

It follows llama.cpp's EAGLE-3 drafting (vendor/llama.cpp/common/speculative.cpp,
`common_speculative_impl_draft_eagle3`): the target's context extracts the inputs of the three
layers the draft's `eagle3.target_layers` names; the draft's context (whose `ctx_other` is the
target's, where its graph finds the target's token embeddings) runs the *encoder* graph on those
features (fc, the `g` rows) and the *decoder* graph on pairs (token at P+1, g at P) at position P.
Each draft step then feeds the argmax token and the step's `t_h_nextn` to the next one: the
pre-norm output for an EAGLE-3 head, the normed output for an EAGLE-3.1 head with norm_output
(homespec's patch, kernels/llamacpp/eagle3.1.patch, which also applies fc_norm in the encoder).
Greedy chains only: llama.cpp's drafter takes the top candidate of each step.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from homespec.backends.llamacpp.amx import model_params
from homespec.backends.llamacpp.batch import fill_batch, run_decode
from homespec.backends.llamacpp.exports import entry_point
from homespec.backends.llamacpp.features import LayerInputCapture
from homespec.backends.llamacpp.lib import (
    LogCollector, capture_log, import_llama_cpp, layer_inp_entry_points, reason,
)
from homespec.errors import FormatError, HomespecError


@dataclass(frozen=True, slots=True)
class Chain:
    tokens: list[int]  # the drafted tokens, greedy
    logits: np.ndarray  # [k, V] float32: llama.cpp's draft logits per step (target vocabulary)


class LlamaCppEagle3:
    """A target GGUF and an eagle3 draft GGUF in two llama.cpp contexts (CPU, one sequence)."""

    def __init__(self, target: str | os.PathLike[str], draft: str | os.PathLike[str], *, n_ctx: int = 2048,
                 n_threads: int | None = None) -> None:
        self._ll = ll = import_llama_cpp()
        from llama_cpp import llama_cpp_ext

        self._ext = llama_cpp_ext
        self._log = LogCollector()
        self._handles: list[tuple[Any, Any]] = []
        threads = n_threads or os.cpu_count() or 1
        with capture_log(self._log):
            self._tm = self._load(os.fspath(target))
            self.n_layer = ll.llama_model_n_layer(self._tm)
            self.n_embd = ll.llama_model_n_embd(self._tm)
            self.n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self._tm))
            self._tc = self._context(self._tm, n_ctx, threads, other=None)
            self._dm = self._load(os.fspath(draft))
            self._dc = self._context(self._dm, n_ctx, threads, other=self._tc)
        entry = layer_inp_entry_points(ll)
        if entry is None:
            raise HomespecError("this llama-cpp-python build does not export llama_set_embeddings_layer_inp",
                                hint="rebuild it with `bash scripts/setup.sh`, or skip the check with --no-check")
        ids_fn = entry_point("llama_model_target_layer_ids", ll.llama_cpp._lib)
        n_fn = entry_point("llama_model_target_layer_ids_n", ll.llama_cpp._lib)
        if ids_fn is None or n_fn is None:
            raise HomespecError("this llama-cpp-python build does not export llama_model_target_layer_ids",
                                hint="rebuild it with `bash scripts/setup.sh`")
        ids_fn.argtypes = n_fn.argtypes = [ctypes.c_void_p]
        ids_fn.restype, n_fn.restype = ctypes.POINTER(ctypes.c_int32), ctypes.c_uint32
        n = n_fn(self._dm)
        if n != 3:
            raise FormatError(f"{draft}: not an eagle3 draft ({n} target layers)", hint="export it with homespec draft export")
        self.layers = tuple(int(ids_fn(self._dm)[i]) for i in range(n))
        self._cap = LayerInputCapture(entry, self.n_layer, self.n_embd)
        self._cap.ctx = self._tc
        self._cap.set_layers(self.layers)
        self.n_embd_draft = ll.llama_model_n_embd(self._dm)
        self._ext.llama_set_embeddings_nextn(self._dc, True, True)
        self._tbatch = ll.llama_batch_init(n_ctx, 0, 1)
        self._dbatch = ll.llama_batch_ext_init(self._dc)

    def _load(self, path: str) -> Any:
        ll = self._ll
        mp = model_params(ll)
        mp.n_gpu_layers = 0
        model = ll.llama_model_load_from_file(path.encode(), mp)
        if not model:
            raise FormatError(f"llama.cpp could not load {path}: {reason(self._log, 'unknown reason')}",
                              hint="pass a complete GGUF")
        self._handles.append(("model", model))
        return model

    def _context(self, model: Any, n_ctx: int, threads: int, other: Any) -> Any:
        ll = self._ll
        cp = ll.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = cp.n_ubatch = n_ctx
        cp.n_threads = cp.n_threads_batch = threads
        cp.no_perf = True
        if other is not None:
            cp.ctx_other = other
        ctx = ll.llama_init_from_model(model, cp)
        if not ctx:
            raise HomespecError(f"llama.cpp could not create a context: {reason(self._log, 'unknown reason')}",
                                hint="lower the context size")
        self._handles.append(("ctx", ctx))
        return ctx

    def target_pass(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
        """Decode `tokens` from position 0 in a fresh target cache. -> features [n, 3H], greedy next token."""
        ll, b = self._ll, self._tbatch
        ll.llama_memory_clear(ll.llama_get_memory(self._tc), True)
        fill_batch(b, [(int(t), i, (0,), i == len(tokens) - 1) for i, t in enumerate(tokens)])
        run_decode(ll, self._tc, b, self._log, hint="shorten the context")
        feats = self._cap.collect(len(tokens))
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self._tc, len(tokens) - 1), shape=(self.n_vocab,))
        return feats, int(np.argmax(logits))

    def _process(self, kind: int, rows: list[tuple[int | None, int, np.ndarray, bool]]) -> None:
        """One llama_process call: rows of (token or None, position, embedding row, output)."""
        ll, b = self._ll, self._dbatch
        ll.llama_batch_ext_clear(b)
        keep = []
        for token, pos, row, out in rows:
            row = np.ascontiguousarray(row, np.float32)
            keep.append(row)
            embd = ll.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.shape[0])
            if token is None:
                idx = ll.llama_batch_ext_add_embd(b, 0, embd)
            else:
                idx = ll.llama_batch_ext_add_token(b, 0, int(token))
                ll.llama_batch_ext_set_embd_token(b, idx, embd)
            p = ll.llama_pos(pos)
            ll.llama_batch_ext_set_pos(b, idx, ctypes.byref(p))
            if out:
                ll.llama_batch_ext_set_output_logits(b, idx, True)
        with capture_log(self._log):
            rc = ll.llama_process(self._dc, kind, b)
        if rc != 0:
            raise HomespecError(f"llama_process failed (code {rc}): {reason(self._log, 'no detail')}",
                                hint="shorten the context")

    def _nextn(self, n_rows: int) -> np.ndarray:
        ptr = self._ext.llama_get_embeddings_nextn(self._dc)
        return np.ctypeslib.as_array(ptr, shape=(n_rows, self.n_embd_draft)).copy()

    def greedy(self, tokens: Sequence[int], n: int, stop: set[int] | frozenset[int] = frozenset()) -> list[int]:
        """The target's greedy continuation of `tokens`: up to n tokens, ending before a `stop` token
        (the cache kept between steps: one row per step after the prompt)."""
        ll, b = self._ll, self._tbatch
        ll.llama_memory_clear(ll.llama_get_memory(self._tc), True)
        rows = [(int(t), i, (0,), i == len(tokens) - 1) for i, t in enumerate(tokens)]
        out: list[int] = []
        while len(out) < n:
            fill_batch(b, rows)
            run_decode(ll, self._tc, b, self._log, hint="shorten the context")
            logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self._tc, len(rows) - 1), shape=(self.n_vocab,))
            nxt = int(np.argmax(logits))
            if nxt in stop:
                break
            out.append(nxt)
            rows = [(nxt, len(tokens) + len(out) - 1, (0,), True)]
        return out

    def draft(self, tokens: Sequence[int], k: int) -> Chain:
        """Greedy chain of k draft tokens after `tokens` (the target's next token is the root)."""
        feats, root = self.target_pass(tokens)
        return self.draft_from(tokens, feats, root, k)

    def draft_from(self, tokens: Sequence[int], feats: np.ndarray, root: int, k: int) -> Chain:
        """The chain after `tokens` from the target's features of them [n, 3H] (rows of a longer pass
        over the same text serve: a causal target's features of a prefix do not change) and its next
        token `root`."""
        n = len(tokens)
        feats = feats[:n]
        self._ll.llama_memory_clear(self._ll.llama_get_memory(self._dc), True)
        # encoder: g[p] = fc(features[p]) (after norm_before_fc when the head has it)
        self._process(self._ll.LLAMA_PROCESS_TYPE_ENCODE, [(None, p, feats[p], True) for p in range(n)])
        g = self._nextn(n)  # [n, H_draft]
        # decoder KV of the context: (token[p+1], g[p]) at p, in one call as llama.cpp's process()
        # does; then the seed (root, g[n-1]) at n-1 alone, as its draft() does. (A row's pre-norm
        # output is read by batch index among *output* rows, so the seed must not share a call
        # with rows that produce none.)
        if n > 1:
            self._process(self._ll.LLAMA_PROCESS_TYPE_DECODE, [(int(tokens[p + 1]), p, g[p], False) for p in range(n - 1)])
        rows = [(root, n - 1, g[n - 1], True)]
        out_tokens, out_logits = [], []
        for step in range(k):
            self._process(self._ll.LLAMA_PROCESS_TYPE_DECODE, rows)
            i = len(rows) - 1
            logits = np.ctypeslib.as_array(self._ll.llama_get_logits_ith(self._dc, i), shape=(self.n_vocab,)).copy()
            # the next step's hidden state: t_h_nextn (pre-norm, or normed with norm_output)
            nextn = np.ctypeslib.as_array(self._ext.llama_get_embeddings_nextn_ith(self._dc, i),
                                          shape=(self.n_embd_draft,)).copy()
            tok = int(np.argmax(logits))
            out_tokens.append(tok)
            out_logits.append(logits)
            rows = [(tok, n + step, nextn, True)]
        return Chain(out_tokens, np.stack(out_logits))

    def close(self) -> None:
        ll = getattr(self, "_ll", None)
        if ll is None:
            return
        if getattr(self, "_tbatch", None) is not None:
            ll.llama_batch_free(self._tbatch)
            self._tbatch = None
        if getattr(self, "_dbatch", None) is not None:
            ll.llama_batch_ext_free(self._dbatch)
            self._dbatch = None
        for kind, h in reversed(self._handles):  # draft context first: it reads the target's
            (ll.llama_free if kind == "ctx" else ll.llama_model_free)(h)
        self._handles = []

    def __enter__(self) -> "LlamaCppEagle3":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

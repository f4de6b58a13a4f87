"""A model's own multi-token-prediction (MTP) layers, run by llama.cpp beside the model: the draft
network of `--method mtp` (the DraftNet of homespec/contracts/head.py).

Qwen3.5/3.6, Qwen3-Next, GLM-4.5+, DeepSeek-V3 and others ship `nextn_predict_layers` extra blocks after
their trunk (the last `blk.` blocks of the GGUF). llama.cpp loads them with the model (`load_mtp`) and runs
them through a context of their own on the same weights (`LLAMA_CONTEXT_TYPE_MTP`: the graph
`LLM_GRAPH_TYPE_DECODER_MTP` of src/models/<arch>.cpp, with a KV cache of the MTP layers alone,
llama-model.cpp create_memory), as llama-server's `--spec-type draft-mtp` does (common/speculative.cpp,
`common_speculative_impl_draft_mtp`; the context made in `common_speculative_init_result`). Its graph
takes a token and a hidden state row: at position p + 1 it pairs the target's last hidden state at p
(`t_h_nextn`, which the target hands out for every row: backends/llamacpp/features.py NextnCapture) with
the token at p + 1 and predicts the token at p + 2; its own `t_h_nextn` row feeds the next draft step.

That is EAGLE-3's entry convention one position on (contracts/head.py: entry j pairs the feature at j with
the token at j + 1), so this network is the eagle3 head's (backends/llamacpp/head.py) with three
differences, all here: it is a context on the target's own model (nothing loaded; the model outlives
it), its "encoder" is the identity (the target's row is what the layer reads), and every entry sits one
position later than the frame's. The sequence ids per lane, the tree levels with copied ids, the
windowless cache and the host's top-k over the logits (the whole target vocabulary: MTP layers share the
target's output head) are the head's, and so is the drafting policy (speculative/drafters/mtp.py).

A model with several MTP blocks (Step-3.5, MiMo-2) trains block i for draft step i; llama.cpp's driver
rebuilds each block's KV over the draft (`chain_heads`). homespec drafts with the first block at every
step, which those blocks' models are not trained for: their drafts accept less (docs/speculative.md).

Imported lazily with the llama.cpp backend; no torch here.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from homespec.backends.llamacpp.head import HeadFile, LlamaCppHead
from homespec.backends.llamacpp.lib import memory_report, reason
from homespec.backends.llamacpp.load import GGML_TYPES
from homespec.contracts.backend import MemoryReport
from homespec.errors import HomespecError, UsageError
from homespec.formats.gguf import read_gguf_header


def mtp_layers(target: Any) -> int:
    """How many MTP blocks the target's model carries (0: none, or not loaded)."""
    return int(target._ll.llama_model_n_layer_nextn(target._model)) if target.settings.load_mtp else 0


class LlamaCppMtp(LlamaCppHead):
    """The target's MTP layers in a llama.cpp context of their own: a DraftNet for every lane of
    `target` (a llama.cpp backend loaded with load_mtp, whose features are its last hidden state)."""

    in_target_model = True  # its weights are in the target's model buffers (Session.memory splits them out)

    def __init__(self, target: Any, *, lanes: int, cells_per_lane: int, topk: int,
                 n_threads: int | None = None) -> None:
        if mtp_layers(target) == 0:
            raise UsageError(f"{os.path.basename(target.model_path)} has no MTP layers (nextn_predict_layers)",
                             hint="use --method eagle3, ngram or auto")
        self._target = target
        self.n_mtp = mtp_layers(target)
        n_embd = target.hidden_size
        # the whole target vocabulary: the MTP block's logits come out of the target's output head
        info = HeadFile(target.model_path, (), n_embd, None, 0, np.arange(target.n_vocab, dtype=np.int64))
        super().__init__(info, target, lanes=lanes, cells_per_lane=cells_per_lane, topk=topk,
                         n_threads=n_threads, device_topk=False)
        target.attach(self)  # this context runs on the target's model: it goes first

    # --- the hooks LlamaCppHead.__init__ calls ----------------------------------------------

    def _load(self, path: str, target: Any) -> Any:
        return target._model  # the MTP blocks came with the target (load_mtp); nothing to load

    def _check_layers(self) -> None:
        """No layers to match: the MTP block reads the target's last hidden state."""

    def _row_width(self) -> int:
        """An MTP context reads rows of the model's n_embd_out (llama-batch.cpp,
        llama_batch_ext_select_n_embd_inp); homespec hands it the last hidden state, n_embd wide."""
        width = int(self._ll.llama_model_n_embd_out(self._model))
        if width != self.n_embd:
            raise UsageError(f"{os.path.basename(self._target.model_path)}'s MTP layers read {width}-wide rows, "
                             f"its hidden state is {self.n_embd}: homespec cannot feed them",
                             hint="use --method eagle3, ngram or auto")
        return width

    def _ask_for_topk(self, k: int) -> bool:
        return False  # homespec's device top-k is in the eagle3 graph only: the host picks from the logits

    def _prunes_rows(self) -> bool:
        return False  # several MTP graphs take their next rows before they select the outputs

    def _context(self, target: Any, *, n_ctx: int, n_seq: int, n_threads: int | None) -> Any:
        ll, s = self._ll, target.settings
        cp = ll.llama_context_default_params()
        cp.ctx_type = ll.LLAMA_CONTEXT_TYPE_MTP  # the DECODER_MTP graph and a KV cache of the MTP layers
        cp.n_ctx = n_ctx
        cp.n_batch = cp.n_ubatch = min(max(64, n_seq), n_ctx)  # a tree level, or a chunk of committed entries
        cp.n_seq_max = n_seq
        cp.kv_unified = True  # one cell carries every tree path through it
        cp.type_k, cp.type_v = GGML_TYPES[s.type_k], GGML_TYPES[s.type_v]  # the target's KV types
        cp.n_threads = cp.n_threads_batch = n_threads or s.n_threads or os.cpu_count() or 1
        cp.n_rs_seq = 0  # its memory is attention only (common/speculative.cpp sets 0 too)
        cp.no_perf = True
        cp.ctx_other = target._ctx  # as llama-server's MTP context (only some architectures read it)
        ctx = ll.llama_init_from_model(self._model, cp)
        if not ctx:
            raise HomespecError(f"llama.cpp could not create the MTP layers' context: {reason(self._log, 'unknown reason')}",
                                hint="a smaller --ctx or fewer --parallel lanes need less memory")
        return ctx

    # --- the frame's positions, one on -------------------------------------------------------

    def encode(self, features: np.ndarray) -> np.ndarray:
        """[n, H] the target's last hidden states: what the MTP block reads as they are."""
        return np.ascontiguousarray(features, dtype=np.float32)

    def _cell(self, pos: int) -> int:
        return pos + 1  # the frame's entry j (feature at j, token at j + 1) sits at j + 1

    # --- memory and teardown ---------------------------------------------------------------------

    def memory_report(self) -> MemoryReport:
        """The MTP context's own buffers from llama.cpp's lines; its weights are the MTP blocks'
        tensors as the file stores them (llama.cpp loads them into the target's model buffers)."""
        rep = memory_report(self._log)
        return MemoryReport(weights_bytes=mtp_weight_bytes(self._target.model_path), kv_bytes=rep.kv_bytes,
                            compute_bytes=rep.compute_bytes, device=rep.device, detail=rep.detail)

    def close(self) -> None:
        self._model = None  # the target's: freed by the target, after this context
        super().close()


def mtp_weight_bytes(path: str) -> int:
    """Bytes of the MTP blocks' tensors in a GGUF (blk.i for i >= the trunk's block count)."""
    h = read_gguf_header(path)
    arch = h.metadata.get("general.architecture")
    n_all, nextn = int(h.metadata.get(f"{arch}.block_count", 0)), int(h.metadata.get(f"{arch}.nextn_predict_layers", 0))
    first = n_all - nextn
    return sum(t.n_bytes for t in h.tensors
               if nextn and t.name.startswith("blk.") and int(t.name.split(".")[1]) >= first)

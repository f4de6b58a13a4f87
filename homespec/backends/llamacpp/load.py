"""Loading a GGUF model and creating its llama.cpp context (helpers of backends/llamacpp/backend.py).

Imported lazily with it; llama_cpp arrives as the `ll` argument (import_llama_cpp()).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from homespec.backends.llamacpp import exports
from homespec.backends.llamacpp.amx import model_params
from homespec.backends.llamacpp.features import EvalCallbackCapture, LayerInputCapture
from homespec.backends.llamacpp.lib import LogCollector, layer_inp_entry_points, reason
from homespec.backends.settings import BackendSettings
from homespec.errors import FormatError, HomespecError
from homespec.formats.gguf import read_gguf_header

# ggml_type ids (ggml.h) of the KV cache types llama.cpp accepts.
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}


def load_model(ll: Any, path: str, s: BackendSettings, log: LogCollector) -> Any:
    """The llama_model, or a FormatError naming the file and llama.cpp's first error line."""
    mp = model_params(ll)
    mp.n_gpu_layers = s.n_gpu_layers if s.n_gpu_layers >= 0 else 2**31 - 1
    mp.load_mtp = s.load_mtp  # else llama.cpp skips the MTP tensors (TENSOR_SKIP): plain decoding never reads them
    model = ll.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise FormatError(
            f"llama.cpp could not load {path}: {reason(log, 'unknown reason')}",
            hint="is it a complete GGUF file? re-download it, or check it with `homespec plan --model <file>`",
        )
    return model


def choose_capture(ll: Any, which: str, n_layer: int, n_embd: int) -> LayerInputCapture | EvalCallbackCapture:
    """llama.cpp's own layer-input extraction when exported, else the eval callback."""
    entry = layer_inp_entry_points(ll) if which in ("auto", "layer_inp") else None
    if entry is not None:
        return LayerInputCapture(entry, n_layer, n_embd, gather=exports.layer_rows_entry_point())
    if which == "layer_inp":
        raise HomespecError(
            "this llama-cpp-python build does not export llama_set_embeddings_layer_inp",
            hint="use feature_capture='eval_callback', or rebuild with `bash scripts/setup.sh`",
        )
    return EvalCallbackCapture(ll, n_layer, n_embd)


def new_context(
    ll: Any, model: Any, s: BackendSettings, max_leaves: int,
    capture: LayerInputCapture | EvalCallbackCapture, log: LogCollector, path: str, *, unified: bool = True,
) -> Any:
    """A context whose unified KV cache can hold `max_leaves` sequences (one per tree path);
    `unified=False`: one KV stream of n_ctx / max_leaves cells per sequence instead."""
    cp = ll.llama_context_default_params()
    cp.n_ctx = s.n_ctx
    cp.n_batch = s.n_batch
    cp.n_ubatch = s.n_ubatch
    cp.n_seq_max = max_leaves
    # One KV buffer shared by all sequences: a cell can then carry several sequence ids,
    # which is what lets tree nodes shared by several paths be computed once.
    cp.kv_unified = unified
    cp.n_threads = cp.n_threads_batch = s.n_threads or physical_cores()
    cp.type_k = GGML_TYPES[s.type_k]
    cp.type_v = GGML_TYPES[s.type_v]
    cp.flash_attn_type = {None: ll.LLAMA_FLASH_ATTN_TYPE_AUTO, True: ll.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                          False: ll.LLAMA_FLASH_ATTN_TYPE_DISABLED}[s.flash_attn]
    cp.embeddings = False  # logits only; features come from the capture, not the pooled embedding
    # a sliding-window cache of the window alone (llama-server's default; what the plan budgets):
    # prompt reuse past the window resumes from checkpoints (backends/llamacpp/state.py)
    cp.swa_full = False
    # a recurrent state's per-token snapshots, for giving back rejected draft tokens (llama.cpp clamps
    # it to 0 for an architecture without them: backends/llamacpp/rollback.py replays instead)
    cp.n_rs_seq = s.rollback
    cp.no_perf = True
    if isinstance(capture, EvalCallbackCapture):
        cp.cb_eval = capture.callback
    ctx = ll.llama_init_from_model(model, cp)
    if not ctx:
        raise HomespecError(
            f"llama.cpp could not create a context for {path}: {reason(log, 'unknown reason')}",
            hint="a smaller --ctx needs less memory; `homespec plan --model FILE --ctx N` shows what fits",
        )
    return ctx


def physical_cores() -> int:
    """llama.cpp's own advice: one thread per physical core (hyper-threads only contend)."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def flash_attn_active(s: BackendSettings, log_lines: list[str]) -> bool:
    """On auto, llama.cpp logs its choice ("resolve_fused_ops: Flash Attention enabled")."""
    if s.flash_attn is not None:
        return s.flash_attn
    return any("Flash Attention enabled" in line for line in log_lines)


def token_embd(path: str, rows_per_chunk: int = 1024) -> np.ndarray:
    """token_embd.weight dequantised with the gguf package into an fp16 table -> [V, H].

    fp16 is what the planner budgets on the host ("draft embeddings": n_vocab x n_embd x 2); the
    table is filled chunk by chunk, so no float32 copy of the whole table exists even briefly
    (a 128k x 8192 table would be 4 GiB in float32). The tensor is found with homespec's own
    header reader and mapped alone: gguf.GGUFReader turns every metadata array into numpy objects
    first (SmolLM2's 49k-token vocabulary: 160 MiB, briefly, for one tensor)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    header = read_gguf_header(path)
    offset = header.data_offset
    for t in header.tensors:
        if t.name == "token_embd.weight":
            n_embd, n_vocab = t.shape[0], t.shape[1]  # ggml's ne: [H, V]
            data = np.memmap(path, dtype=np.uint8, mode="r", offset=offset, shape=(n_vocab, t.n_bytes // n_vocab))
            qtype = GGMLQuantizationType[t.ggml_type.upper()]
            table = np.empty((n_vocab, n_embd), dtype=np.float16)
            for lo in range(0, n_vocab, rows_per_chunk):
                rows = dequantize(data[lo : lo + rows_per_chunk], qtype)
                table[lo : lo + len(rows)] = np.asarray(rows, dtype=np.float32).reshape(len(rows), n_embd)
            return table
        offset += -(-t.n_bytes // header.alignment) * header.alignment
    raise FormatError(f"{path} has no token_embd.weight tensor", hint="is this a decoder-only language model GGUF?")

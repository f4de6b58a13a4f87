"""Bytes per consumer, per backend: what a speculative setup allocates, and on which device.

Every function here is pure arithmetic over specs and settings; docs/planner.md gives each
formula with its source and a worked example. The lines they become: homespec.plan.lines.
"""

from __future__ import annotations

from homespec.errors import UsageError
from homespec.formats.families import RS_ROLLBACK_ARCHS
from homespec.plan.settings import EXL2_CACHE, Settings
from homespec.quant.tables import GGML_TYPES
from homespec.quant.weights import group_weights
from homespec.types import DraftSpec, ModelSpec

MIB = 1 << 20

# llama.cpp keeps a CUDA context, cuBLAS workspace and the driver's own allocations outside its
# buffers: ~450 MiB on an RTX 4090 in its memory breakdown; Ollama reserves 457 MiB per GPU
# (envconfig GpuOverhead default + minimum memory, ollama/llm/memory.go).
CUDA_RESERVE = 450 * MIB
# exllamav2's autosplit leaves 192 MiB free on the first GPU and 64 MiB on the others
# (exllamav2/model.py, load_autosplit reserve_vram defaults).
EXL2_RESERVE_FIRST = 192 * MIB
EXL2_RESERVE_OTHER = 64 * MIB
# PyTorch's CUDA context + cuBLAS/cuDNN handles + caching-allocator slack, measured on consumer
# cards at 300-600 MiB; the planner takes 512 MiB.
TORCH_CUDA_RESERVE = 512 * MIB
# Metal keeps its command buffers and residency sets inside the working set: llama.cpp's Metal
# backend adds no fixed reserve beyond its buffers.
APPLE_RESERVE = 0

# exllamav2 pre-allocates its forward scratch for max_input_len tokens (ExLlamaV2Config default 2048).
EXL2_MAX_INPUT_LEN = 2048


# --- KV element sizes ------------------------------------------------------------------------

def _kv_block(kv_type: str) -> tuple[int, int]:
    """(elements per block, bytes per block) of a KV element type, from the ggml type table."""
    return GGML_TYPES[kv_type.upper()]


def kv_row_bytes(kv_type: str, n_elements: int) -> int:
    """ggml_row_size: bytes of one row of n_elements of a (possibly block-quantised) type."""
    block, size = _kv_block(kv_type)
    if n_elements % block:
        raise UsageError(
            f"a {kv_type} KV cache needs a row length divisible by {block}, this model has {n_elements}",
            hint="use --kv-type f16",
        )
    return n_elements // block * size


# exllamav2 cache bytes per element, scales included: Q8/Q6/Q4 store one fp16 scale per 32 values
# (exllamav2/cache.py: ExLlamaV2Cache_Q4 uses 4-bit values + fp16 scales per group of 32).
EXL2_CACHE_BYTES = {"fp16": 2.0, "q8": 1.0 + 2 / 32, "q6": 0.75 + 2 / 32, "q4": 0.5 + 2 / 32}


def torch_weight_bytes(model: ModelSpec, dtype_bytes: int) -> int:
    """The torch backend dequantises every weight to one float dtype."""
    return group_weights(model).n_params * dtype_bytes


# --- KV caches -------------------------------------------------------------------------------


def ctx_padding(s: Settings) -> int:
    """llama.cpp rounds the context up to a multiple of 256 (llama-context.cpp: cparams.n_ctx =
    GGML_PAD(n_ctx, 256), and n_ctx_seq likewise per sequence)."""
    return 256


def kv_cells(model: ModelSpec, s: Settings, layer: int) -> int:
    """Cells of one sequence's stream in a layer's KV cache.

    Each of s.n_seq sequences has its own stream of n_ctx_seq cells (llama-server -np N without a
    unified cache: n_ctx_seq = GGML_PAD(n_ctx / n_seq, 256), llama-context.cpp). Sliding-window
    layers keep GGML_PAD(min(n_ctx_seq, n_swa + n_ubatch), 256) cells (llama-kv-cache-iswa.cpp), or
    all of them with --swa-full."""
    pad = ctx_padding(s)
    n_ctx = -(-s.n_ctx // pad) * pad
    if model.sliding_window and layer in model.swa_layers and not s.swa_full:
        swa = -(-min(n_ctx, model.sliding_window + s.n_ubatch) // pad) * pad
        return min(n_ctx, swa)
    return n_ctx


def has_kv(model: ModelSpec, layer: int) -> bool:
    """Recurrent layers keep a state instead (llama_memory_hybrid filters them out of the KV cache)."""
    return layer not in model.recurrent_layers


def kv_row_dims(model: ModelSpec) -> tuple[int, int]:
    """(K, V) elements per cell per layer. MLA (deepseek2 with key_length_mla in its header) stores
    only the compressed latent kv_lora_rank + qk_rope_head_dim as K, and no V tensor: V is a view of K
    (llama-kv-cache.cpp: has_v = !is_mla)."""
    if model.is_mla:
        return model.kv_lora_rank + model.qk_rope_head_dim, 0
    return model.n_head_kv * model.head_dim, model.n_head_kv * (model.head_dim_v or model.head_dim)


def recurrent_layer_bytes(model: ModelSpec, s: Settings, layer: int) -> int:
    """A recurrent layer's R (conv / token-shift) and S (SSM / delta-rule) state: f32, one row per
    sequence (llama-memory-recurrent.cpp: mem_size = max(1, n_seq_max) rows of n_embd_r() and
    n_embd_s() each), times the copies speculation keeps to give rejected drafts back
    (rollback_copies)."""
    if layer not in model.recurrent_layers:
        return 0
    return max(1, s.n_seq) * (model.rs_r + model.rs_s) * 4 * rollback_copies(model, s)


def rollback_copies(model: ModelSpec, s: Settings) -> int:
    """Copies of each sequence's recurrent state a drafting run keeps (backends/llamacpp/rollback.py): the
    state, llama.cpp's n_rs_seq per-token snapshots where the architecture has them (the tensors are
    widened to 1 + n_rs_seq row groups, llama-memory-recurrent.cpp), and the one saved on the device
    before a chain they do not cover (every chain where there are none; with them, only where chains
    longer than n_rs_seq are verified too: s.rollback_saves)."""
    if s.rollback <= 0 or s.backend != "llamacpp":
        return 1
    if model.arch not in RS_ROLLBACK_ARCHS:
        return 2
    return 1 + s.rollback + (1 if s.rollback_saves else 0)


def target_kv_layer_bytes(model: ModelSpec, s: Settings, layer: int) -> int:
    """One layer's KV cache for all s.n_seq sequences."""
    if not has_kv(model, layer):
        return 0
    return max(1, s.n_seq) * _kv_stream_bytes(model, s, layer)


def _kv_stream_bytes(model: ModelSpec, s: Settings, layer: int) -> int:
    cells = kv_cells(model, s, layer)
    head_dim_v = model.head_dim_v or model.head_dim
    if s.backend == "exl2":
        per_elt = EXL2_CACHE_BYTES[_exl2_mode(s.type_k)]
        return int(cells * model.n_head_kv * (model.head_dim + head_dim_v) * per_elt)
    if s.backend == "torch":
        return cells * model.n_head_kv * (model.head_dim + head_dim_v) * _torch_bytes(s)
    k_dim, v_dim = kv_row_dims(model)
    for kv_type, dim in ((s.type_k, model.head_dim), (s.type_v, 0 if model.is_mla else head_dim_v)):
        block = _kv_block(kv_type)[0]
        if dim % block:  # llama.cpp refuses a block that splits one head
            raise UsageError(
                f"a {kv_type} KV cache needs a head size divisible by {block}; this model's is {dim}",
                hint="use --kv-type f16",
            )
    k = kv_row_bytes(s.type_k, k_dim)
    v = kv_row_bytes(s.type_v, v_dim) if v_dim else 0
    return cells * (k + v)


# An EAGLE head in llama.cpp (backends/llamacpp/head.py): rows per call, and how its context is sized.
HEAD_UBATCH = 64
HEAD_SINKS = 4  # the first entries a windowed head keeps seeing (backends/llamacpp/head_gguf.py)


def head_seq_ids(lanes: int, topk: int) -> int:
    """llama.cpp sequence ids of the head's context: the encoder's scratch id, and per lane its
    committed entries, a write id and two alternating sets of topk tree slots."""
    return 1 + lanes * (2 + 2 * topk)


def head_ubatch(lanes: int, topk: int) -> int:
    """Rows per head call: HEAD_UBATCH, raised to one output row per sequence id (llama.cpp asserts it)."""
    return max(HEAD_UBATCH, head_seq_ids(lanes, topk))


def head_cells(lane_ctx: int, window: int | None, sinks: int, depth: int, topk: int) -> int:
    """KV cells one lane of an EAGLE head in llama.cpp holds (backends/llamacpp/head.py): its committed
    entries (all of the lane's context, or a window's worth and the sinks), the entry before the
    window that stays, and a draft tree's levels (topk nodes each)."""
    entries = lane_ctx if window is None else min(lane_ctx, window + sinks + 1)
    return entries + depth * topk + 2


def head_gguf_bytes(draft: DraftSpec, dtype: str) -> int:
    """The head as the eagle3 GGUF homespec converts it to (backends/llamacpp/head_convert.py): its matrices
    in `dtype` (q8_0: 34 bytes per 32 weights; f16: 2 per weight), computed from the checkpoint's stored
    bytes; an eagle3 GGUF given as one is loaded as it is."""
    stored = {"f32": 4, "bf16": 2, "f16": 2}.get(draft.dtype)
    if stored is None:  # an eagle3 GGUF: its own tensors
        return draft.weight_bytes
    elements = draft.weight_bytes // stored
    return elements * 34 // 32 if dtype == "q8_0" else elements * 2


def head_kv_bytes(draft: DraftSpec, lanes: int, cells: int) -> int:
    """The head's f16 KV for `lanes` lanes of `cells` cells; llama.cpp pads a context to 256 cells."""
    return _pad(lanes * cells, 256) * draft.n_layer * draft.kv_dim * 2


def head_compute_bytes(draft: DraftSpec, lanes: int, cells: int, topk: int) -> int:
    """The head context's compute buffer (llama.cpp's graph allocator peak for one ubatch of u rows):
    the larger of the output phase (the draft-vocabulary logits of u rows, u x V_draft f32; the top-k
    of homespec's patch works on those, and no target-vocabulary row is built) and the attention phase
    (flash attention's f16 mask over every cell, plus the layer's few u x n_embd activations), plus
    one hidden state. Checked against llama.cpp's own lines (tests/plan/test_plan_llamacpp.py)."""
    u = head_ubatch(lanes, topk)
    row = u * draft.n_embd * 4
    output = u * draft.draft_vocab * 4
    attention = _pad(lanes * cells, 256) * u * 2 + 4 * row
    return max(output, attention) + row


def head_output_bytes(draft: DraftSpec, lanes: int, topk: int, n_vocab: int) -> int:
    """The head context's output buffer, host memory: a logits row over the target's vocabulary and two
    n_embd rows (the embeddings the device's top-k returns through, and the next-step rows) for each
    sequence id (llama.cpp reserves one output row per sequence)."""
    return head_seq_ids(lanes, topk) * (n_vocab + 2 * draft.n_embd) * 4


def mtp_kv_bytes(draft: DraftSpec, s: Settings, lanes: int, cells: int) -> int:
    """The MTP layers' own context (backends/llamacpp/mtp.py): a KV cache of just those layers (full
    attention, MLA's latent where the model has it) in the target's KV types, over `lanes` lanes of
    `cells` cells in one buffer llama.cpp pads to 256 cells."""
    k_dim, v_dim = kv_row_dims(draft.model)
    per_cell = kv_row_bytes(s.type_k, k_dim) + (kv_row_bytes(s.type_v, v_dim) if v_dim else 0)
    return _pad(lanes * cells, 256) * draft.n_layer * per_cell


def mtp_output_bytes(draft: DraftSpec, lanes: int, topk: int) -> int:
    """The MTP context's output buffer, host memory: per sequence id a logits row over the target's
    vocabulary and the row the next draft step reads (t_h_nextn); its embeddings are off."""
    return head_seq_ids(lanes, topk) * (draft.target_vocab + draft.n_embd) * 4


def _pad(n: int, to: int) -> int:
    return -(-n // to) * to


def draft_kv_bytes(draft: DraftSpec, s: Settings, on_gpu: bool) -> int:
    """The draft's own KV: one decoder layer for an EAGLE head, a whole model for a draft model."""
    if draft.kind == "model" and draft.model is not None:
        return sum(target_kv_layer_bytes(draft.model, s, i) for i in range(draft.model.n_layer))
    if draft.kind == "mtp" and draft.model is not None:
        # the MTP context's own cache of the nextn layers: full attention, the target's KV types
        return draft.n_layer * max(1, s.n_seq) * _kv_stream_bytes(draft.model, s, -1)
    elt = 2 if on_gpu else 4  # the head runs in fp16 on a GPU, fp32 on the CPU
    return max(1, s.n_seq) * s.n_ctx * draft.n_layer * draft.kv_dim * elt


def _exl2_mode(kv_type: str) -> str:
    return EXL2_CACHE[kv_type]


def _torch_bytes(s: Settings) -> int:
    return {"f32": 4, "f16": 2, "bf16": 2}.get(s.torch_dtype, 2)


# --- compute buffers -------------------------------------------------------------------------


def llamacpp_compute_bytes(model: ModelSpec, s: Settings, holds_output: bool, backend: str = "cpu") -> int:
    """llama.cpp's compute buffer on one device: the graph allocator's peak for one ubatch.

    The allocator reuses memory, so the peak is the largest of three phases plus the two hidden
    state buffers (2 x u x n_embd f32) alive throughout:
      * logits: n_vocab x u f32, on the device that holds the output layer;
      * FFN: gate and up activations, 2 x u x n_ff f32;
      * attention. Without flash attention the score matrix n_head x u x n_ctx f32 plus its f32
        mask (n_ctx x u), a transposed f16 copy of V and the u x n_head x head_dim result; with
        flash attention the f16 mask and the result, plus what the device's flash-attention node adds
        (fa_scratch_bytes: f16 copies of one layer's K and V on CUDA and Metal, none on the CPU).
    u = min(n_ubatch, n_batch, n_ctx): llama.cpp caps the batch at the context. Checked against
    llama.cpp 0.3.36's own "compute buffer size" lines (tests/plan/test_plan_llamacpp.py).
    """
    u = min(s.n_ubatch, s.n_batch, s.n_ctx)
    n_ctx = kv_cells(model, s, -1)
    hd_v = model.head_dim_v or model.head_dim
    hidden = 2 * u * model.n_embd * 4
    logits = model.n_vocab * u * 4 if holds_output else 0
    ffn = _ffn_phase(model, s, u, n_ctx)
    result = u * model.n_head * hd_v * 4
    if s.flash_attn:
        attn = n_ctx * u * 2 + result + fa_scratch_bytes(model, s, n_ctx, u, backend)
    else:
        attn = model.n_head * u * n_ctx * 4 + n_ctx * u * 4 + n_ctx * model.n_head_kv * hd_v * 2 + result
    return max(logits, ffn, attn) + hidden


def fa_scratch_bytes(model: ModelSpec, s: Settings, n_ctx: int, u: int, backend: str) -> int:
    """What a backend's flash-attention node allocates beyond its result, in the compute buffer.

    * "cuda" (CUDA, HIP): the tile and MMA kernels (every batch of more than a few tokens) read f16, so
      the node of a K or V cache in another type also holds that cache's f16 copy for one layer
      (ggml-cuda/fattn.cu, ggml_cuda_flash_attn_ext_get_alloc_size).
    * "metal": f16 copies of K and V are reserved whatever the cache type ("always reserve the temp
      buffer to avoid graph reallocations"), plus the per-workgroup partial results of min(u, 32) rows
      x n_head x 32 workgroups x (head_dim_v + 2) f32 (ggml-metal-ops.cpp, flash_attn_ext_extra_*).
    * "cpu": none; its kernel converts rows in its own work buffer. Measured: llama.cpp's CPU compute
      buffer is the same for f16 and q8_0 caches at 8,192 to 262,144 cells."""
    hd_v = model.head_dim_v or model.head_dim
    k_f16 = n_ctx * model.n_head_kv * model.head_dim * 2
    v_f16 = n_ctx * model.n_head_kv * hd_v * 2
    if backend == "cuda":
        return (k_f16 if s.type_k != "f16" else 0) + (v_f16 if s.type_v != "f16" else 0)
    if backend == "metal":
        return k_f16 + v_f16 + 4 * min(u, 32) * model.n_head * 32 * (hd_v + 2)
    return 0


def _ffn_phase(model: ModelSpec, s: Settings, u: int, n_ctx: int) -> int:
    """The FFN phase of one ubatch. A dense layer keeps its gate and up activations (2 x u x n_ff f32).
    An MoE layer keeps the chosen experts' gate, up and gated product at once (3 x u x n_expert_used x
    n_ff_exp f32, build_moe_ffn) beside the attention mask, which stays alive from the attention
    phase (f16 with flash attention, else f32): llama.cpp's compute buffer for tiny qwen3moe,
    qwen3next and deepseek2 files with 8 x 4096-wide experts (tests/plan/test_plan_families.py)."""
    dense = model.n_ff if not model.is_moe or model.n_layer_dense_lead or model.moe_every > 1 else 0
    ffn = 2 * u * dense * 4
    if model.is_moe:
        mask = n_ctx * u * (2 if s.flash_attn else 4)
        ffn = max(ffn, 3 * u * model.n_expert_used * model.n_ff_exp * 4 + mask)
    return ffn


def exl2_input_len(s: Settings) -> int:
    """Tokens one exllamav2 forward takes: max_input_len, which load_autosplit caps at the cache's
    max_seq_len (exllamav2/model.py, load_autosplit_gen)."""
    return min(EXL2_MAX_INPUT_LEN, s.n_ctx)


def exl2_scratch_bytes(model: ModelSpec, tokens: int = EXL2_MAX_INPUT_LEN) -> int:
    """exllamav2 reserves hidden-state, attention and MLP scratch for max_input_len tokens, and the
    fp16 logits of a full input chunk (exllamav2/model.py get_scratch_allocation)."""
    t = tokens
    return t * (model.n_embd * 2 * 4 + model.n_ff * 2 * 2) + t * model.n_vocab * 2


def torch_compute_bytes(model: ModelSpec, s: Settings, tokens: int) -> int:
    """Activations of one forward over `tokens` new tokens (the larger of prefill chunk and tree)."""
    elt = _torch_bytes(s)
    scores = model.n_head * tokens * s.n_ctx * 4  # SDPA with an explicit mask materialises scores
    ffn = tokens * model.n_ff * elt * 3
    logits = tokens * model.n_vocab * 4
    return scores + ffn + logits


def tree_scratch_bytes(model: ModelSpec, draft: DraftSpec, s: Settings) -> int:
    """Verifying a T-node tree returns T rows of logits and 3 captured features per node; the head's
    own drafting keeps top-k x depth rows of draft-vocabulary log-probs."""
    t = s.tree_tokens
    feats = 3 * model.n_embd if draft.kind != "model" else 0
    head = s.draft_topk * s.draft_depth * draft.draft_vocab * 4
    return max(1, s.n_seq) * (t * (model.n_vocab + feats) * 4 + head)


def draft_weight_bytes(draft: DraftSpec, on_gpu: bool) -> int:
    if draft.kind == "model" and draft.model is not None and draft.model.tensors:
        return sum(t.n_bytes for t in draft.model.tensors)
    if draft.kind == "mtp":
        return draft.weight_bytes  # the target file's own (quantised) tensors
    # Heads are stored in bf16/fp16; the CPU path upcasts them to fp32.
    return draft.weight_bytes if on_gpu else draft.weight_bytes * 2

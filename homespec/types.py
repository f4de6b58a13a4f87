"""Typed data that crosses module boundaries: hardware, model shapes, draft heads.

Sizes are int bytes everywhere; GiB appears only in rendering. Every dataclass is frozen:
a spec read from a file or the catalogue is a value, never mutated downstream.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GPU:
    name: str
    vendor: str  # "nvidia" | "apple" | "amd"
    total_bytes: int
    free_bytes: int | None = None
    bandwidth_gbs: float | None = None  # memory bandwidth, 1e9 bytes/s
    index: int = 0
    unified: bool = False  # Apple Silicon: GPU memory is the machine's RAM
    compute_capability: str | None = None  # NVIDIA "8.9"
    bus_width_bits: int | None = None
    mem_clock_mhz: int | None = None
    driver: str | None = None
    fp16_tflops: float | None = None  # dense fp16 tensor throughput, for prefill estimates
    source: str = ""  # "nvml" | "sysctl" | "catalogue"
    # Another machine's GPU, reached through llama.cpp's RPC backend (its ggml-rpc-server's "host[:port]");
    # "" = a GPU of the machine that runs the server.
    remote: str = ""


@dataclass(frozen=True, slots=True)
class Machine:
    gpus: tuple[GPU, ...]
    ram_bytes: int
    ram_free_bytes: int | None = None
    cpu_name: str = ""
    cpu_cores: int = 0
    os: str = ""
    ram_bandwidth_gbs: float | None = None  # for offloaded layers / CPU decoding
    source: str = ""  # "probe" | "catalogue"
    # The CPU's instruction sets by llama.cpp's names ("AVX2", "AVX512", "AMX_INT8", "NEON", ...): which
    # weight layouts its CPU backend repacks (homespec.hardware.isa.llama_features; empty = unknown).
    cpu_features: frozenset[str] = frozenset()
    # The network to the machines whose GPUs are remote (GPU.remote): "1gbe", "10gbe", "tb4", ... or a line
    # rate in Gbit/s (homespec.plan.network.link_from_arg); "" = the default.
    link: str = ""


@dataclass(frozen=True, slots=True)
class TensorInfo:
    name: str  # GGUF-style name: "blk.3.attn_q.weight", "token_embd.weight", "output.weight"
    shape: tuple[int, ...]  # ggml order: ne[0] is the contiguous (innermost) dimension
    ggml_type: str  # "F32", "F16", "Q4_K", ... (EXL2 tensors: "EXL2")
    n_bytes: int
    layer: int | None = None  # the block index for blk.N.*, else None

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A target model's shape, from the catalogue, a GGUF header, config.json or an EXL2 dir."""

    name: str
    arch: str  # llama.cpp architecture name: "llama", "qwen2", "qwen3", "gemma2", ...
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    tied_embeddings: bool = False
    n_params: int | None = None
    quant: str | None = None  # GGUF file type ("Q4_K_M"), "exl2-4.65", "f16", ...
    format: str = "catalogue"  # "catalogue" | "gguf" | "hf" | "exl2"
    tensors: tuple[TensorInfo, ...] | None = None  # exact, when read from a file
    head_dim_v: int | None = None  # when V heads differ from K heads (defaults to head_dim)
    sliding_window: int | None = None  # SWA window (Gemma 2/3, Mistral v0.1)
    swa_layers: tuple[int, ...] = ()  # layers that use the sliding window
    rope_theta: float | None = None
    source: str = ""  # where the numbers came from (path, URL, catalogue entry)
    family: str = ""  # catalogue family, for draft pairing ("llama-3.1-8b")
    file_bytes: int | None = None  # the file's size, when known
    # --- mixture of experts (0 = dense). Names follow llama.cpp's GGUF hparams (docs/planner.md, "MoE").
    n_params_active: int | None = None  # parameters used per token
    n_expert: int = 0  # routed experts per MoE layer
    n_expert_used: int = 0  # experts chosen per token
    n_ff_exp: int = 0  # one routed expert's FFN width
    n_expert_shared: int = 0  # shared experts per MoE layer
    n_ff_shexp: int = 0  # the shared expert's FFN width (0: n_ff_exp x n_expert_shared)
    n_layer_dense_lead: int = 0  # leading dense layers before the MoE ones
    moe_every: int = 1  # every n-th layer is MoE (Llama 4 interleaves)
    # --- multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): 0 = none
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # --- recurrent layers (Mamba, Gated DeltaNet): per-sequence state instead of KV
    recurrent_layers: tuple[int, ...] = ()
    rs_r: int = 0  # llama.cpp n_embd_r(): conv/shift state elements per sequence per layer (f32)
    rs_s: int = 0  # llama.cpp n_embd_s(): recurrent state elements per sequence per layer (f32)
    # Gated DeltaNet shape (Qwen3-Next / Qwen3.5), for predicting its tensors; attention every n-th layer
    full_attn_interval: int = 0
    linear_num_key_heads: int = 0
    linear_key_head_dim: int = 0
    linear_num_value_heads: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    # --- next-token-prediction layers shipped with the model (blk.n_layer .. n_layer + n_nextn_layer - 1)
    n_nextn_layer: int = 0
    # How the KV cache is sized: "" = a rule homespec knows for this architecture, else a note on
    # why the generic rule (every layer, n_head_kv x (head_dim + head_dim_v)) is an assumption.
    kv_rule_note: str = ""

    @property
    def kv_dim(self) -> int:
        """K+V elements per token per layer."""
        return self.n_head_kv * (self.head_dim + (self.head_dim_v or self.head_dim))

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 1

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def is_moe_layer(self, layer: int) -> bool:
        """Whether a layer's FFN is routed experts (leading dense layers and Llama 4's interleave aside)."""
        if not self.is_moe or layer < self.n_layer_dense_lead:
            return False
        step = max(1, self.moe_every)
        return (layer + 1) % step == 0


@dataclass(frozen=True, slots=True)
class AcceptanceRecord:
    """A draft's measured acceptance for one tree shape (a head's `acceptance.json`, homespec.formats.acceptance).

    at_least[d-1] is the share of speculative steps that accepted at least d drafted tokens, so the
    tokens per target pass are 1 + sum(at_least)."""

    depth: int
    topk: int  # 1: a chain
    total: int  # tree nodes, the root included
    at_least: tuple[float, ...]
    steps: int = 0
    source: str = ""  # the file the figures come from


@dataclass(frozen=True, slots=True)
class DraftSpec:
    """A speculative draft: an EAGLE-3 head (one decoder layer) or a small draft model."""

    name: str
    kind: str  # "eagle3" | "eagle3.1" | "model" | "mtp" (the target's own next-token-prediction layers)
    target: str  # the catalogue family it was trained for ("" = any of its vocabulary)
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    draft_vocab: int
    target_vocab: int
    target_hidden: int  # width of each captured target feature (fc takes 3x this)
    weight_bytes: int  # bytes of the weights homespec loads (embeddings come from the target)
    dtype: str = "bf16"
    fc_norm: bool = False
    norm_output: bool = False
    source: str = ""
    tensors: tuple[TensorInfo, ...] | None = None
    model: ModelSpec | None = None  # for kind == "model": the full draft model
    # Published or measured mean tokens per target pass (acceptance length incl. the bonus token)
    # at short context and temperature 0; None = unknown (the planner then uses its default).
    expected_tau: float | None = None
    # The head's recorded acceptance per tree shape (its acceptance.json), when it has one.
    acceptance: tuple[AcceptanceRecord, ...] = ()
    # Bytes one drafting step reads, when less than weight_bytes (an MoE MTP layer reads its chosen experts).
    read_bytes: int | None = None
    # An EAGLE head's attention window (homespec's draft_window): its KV in llama.cpp holds this many
    # entries a lane (plus the first few) instead of the whole context; None: the whole context.
    window: int | None = None

    @property
    def kv_dim(self) -> int:
        return self.n_head_kv * self.head_dim * 2

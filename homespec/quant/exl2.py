"""EXL2 (exllamav2) sizes: a conversion's tensors at an average bits-per-weight, and the KV cache's
bytes per cache mode (tables in profiles/quants.toml [exl2]). Pure: no torch, no exllamav2.
"""

from __future__ import annotations

import math

from homespec.errors import UsageError
from homespec.quant.shapes import layer_of, model_tensor_shapes
from homespec.quant.tables import EXL2_CACHE_MODES, EXL2_HEAD_BITS
from homespec.types import ModelSpec, TensorInfo

# mode -> (bytes per K element, bytes per V element), fp16 group scales included.
EXL2_CACHE_BYTES_PER_ELEMENT: dict[str, tuple[float, float]] = {
    mode: tuple(
        bits / 8 + (2 / m["scale_group"] if m["scale_group"] else 0.0) for bits in (m["k_bits"], m["v_bits"])
    )
    for mode, m in EXL2_CACHE_MODES.items()
}


def exl2_tensors(model: ModelSpec, bpw: float, head_bits: int = EXL2_HEAD_BITS) -> tuple[TensorInfo, ...]:
    """Tensors of an EXL2 conversion at `bpw` average bits per weight over the repeating linear layers.

    exllamav2's optimiser spends the bit budget unevenly between layers but hits the average, and its
    bpw already counts the group scales, so bytes = elements x bpw / 8. The lm_head is quantised at
    `head_bits` (convert.py -hb, default 6; tied models get their own head), embeddings and norms fp16.
    """
    if not 1.0 <= bpw <= 16.0:
        raise UsageError(f"EXL2 bits per weight {bpw} is outside 1..16", hint="typical values are 2.5 to 8.0")
    out = []
    for name, shape in model_tensor_shapes(model):
        n = math.prod(shape)
        if name == "token_embd.weight":
            out.append(TensorInfo(name, shape, "F16", n * 2, None))
            if model.tied_embeddings or model.arch in ("gemma2",):
                out.append(TensorInfo("output.weight", shape, "EXL2", math.ceil(n * head_bits / 8), None))
        elif name == "output.weight":
            out.append(TensorInfo(name, shape, "EXL2", math.ceil(n * head_bits / 8), None))
        elif len(shape) >= 2:
            out.append(TensorInfo(name, shape, "EXL2", math.ceil(n * bpw / 8), layer_of(name)))
        else:
            out.append(TensorInfo(name, shape, "F16", n * 2, layer_of(name)))
    return tuple(out)


def exl2_cache_bytes(mode: str, n_layer: int, n_kv_heads: int, head_dim: int, n_tokens: int,
                     batch: int = 1, n_devices: int = 1) -> int:
    """Bytes of an exllamav2 KV cache (ExLlamaV2Cache / _8bit / _Q4 / _Q6 / _Q8) for `n_tokens`.

    Includes the fp16 scales of the Q modes and the fp16 K/V temp buffers quantised caches keep on
    each device.
    """
    key = mode.upper().removeprefix("CACHE_")
    if key not in EXL2_CACHE_MODES:
        raise UsageError(f"unknown exllamav2 cache mode '{mode}'", hint="one of: " + ", ".join(EXL2_CACHE_MODES))
    m = EXL2_CACHE_MODES[key]
    kv_dim = n_kv_heads * head_dim
    tokens = n_tokens
    if m["scale_group"]:
        # Q caches quantise in 512-element blocks of whole tokens, so the length rounds up.
        q_block = next(b for b in range(1, 513) if kv_dim * b % 512 == 0)
        tokens = -(-n_tokens // q_block) * q_block
    elements = batch * tokens * kv_dim  # per layer, for K and for V each
    per_layer = elements * (m["k_bits"] + m["v_bits"]) // 8
    if m["scale_group"]:
        per_layer += 2 * (elements // m["scale_group"]) * 2
    temp = 2 * batch * tokens * kv_dim * 2 * n_devices if m["temp_fp16"] else 0
    return n_layer * per_layer + temp

"""llama.cpp's quantiser's per-tensor type choice (src/llama-quant.cpp, `llama_tensor_get_type` and
`llama_tensor_get_type_impl`), ported rule for rule.

A GGUF "Q4_K_M" file is a mix: the quantiser picks a type per tensor from its role, its layer and
the model's shape, then demotes types whose block does not divide the tensor's rows. The tables
(block sizes, file-type defaults, the fallback chain) live in profiles/quants.toml
(homespec.quant.tables); the rules that depend on layer counters and shapes are the code below, in
the same order as the C++ so the two can be read side by side. docs/catalogue.md walks through an
example. Pure: no torch, no llama_cpp (the planner imports this).
"""

from __future__ import annotations

from homespec.errors import HomespecError
from homespec.quant.shapes import base_arch, layer_of
from homespec.quant.tables import FALLBACK, GGML_TYPES
from homespec.types import ModelSpec

_IQ_LOW = {"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"}
# File types predict_tensors assumes were made with an importance matrix unless told otherwise.
NEEDS_IMATRIX = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "IQ3_XXS", "Q2_K_S"}


def _category(name: str) -> str:
    # tensor_get_category: exact names first, then substrings in this order.
    if name == "output.weight":
        return "output"
    if name == "token_embd.weight":
        return "token_embd"
    for cat in ("attn_qkv.weight", "attn_kv_b.weight", "attn_v.weight", "attn_k.weight", "attn_q.weight",
                "attn_output.weight"):
        if cat in name:
            return cat.removesuffix(".weight")
    for cat in ("ffn_up", "ffn_gate", "ffn_down"):
        if cat in name:
            return cat
    return "other"


def allows_quantization(name: str, shape: tuple[int, ...]) -> bool:
    """tensor_allows_quantization: only 2-D/3-D weights, never norms, MoE routers or SSM conv kernels."""
    return (len(shape) >= 2 and name.endswith("weight") and "_norm.weight" not in name
            and "ffn_gate_inp.weight" not in name and "ssm_conv1d" not in name)


def _use_more_bits(i: int, n: int) -> bool:
    # The first and last eighth of the layers, and every third layer between, get more bits.
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


class QuantizeState:
    """Counters the quantiser advances tensor by tensor (quantize_state_impl)."""

    def __init__(self, shapes: list[tuple[str, tuple[int, ...]]], model: ModelSpec, imatrix: bool):
        self.n_attention_wv = sum(_category(n) in ("attn_v", "attn_qkv", "attn_kv_b") for n, _ in shapes)
        self.tied = not any(n == "output.weight" for n, _ in shapes)
        self.n_layer = model.n_layer  # n_ffn_down = n_ffn_gate = n_ffn_up = n_layer_all
        self.gqa = model.n_head // max(model.n_head_kv, 1)
        arch = base_arch(model.arch)
        # LLM_TYPE_70B (src/models/llama.cpp, qwen2.cpp): 80 layers with GQA. Its attn_v gets Q5_K.
        self.is_70b = model.n_layer == 80 and (arch == "qwen2" or (arch == "llama" and model.n_head != model.n_head_kv))
        self.imatrix = imatrix
        self.i_wv = self.i_down = self.i_gate = self.i_up = 0
        self.n_expert = model.n_expert

    def layer(self, counter: int, name: str) -> int:
        """layer_info: an MoE model's FFN tensors take their layer from the name (experts are not
        stored in layer order), a dense model's from the category's running counter."""
        if self.n_expert > 1:
            found = layer_of(name)
            return counter if found is None else found
        return counter


def _mix_type(st: QuantizeState, name: str, shape: tuple[int, ...], ftype: str, new: str) -> str:
    """The type llama.cpp's quantiser picks for one weight of an `ftype` file whose default type is
    `new` (llama_tensor_get_type_impl), advancing the per-category counters in `st`."""
    cat = _category(name)
    v_like = cat in ("attn_v", "attn_qkv", "attn_kv_b")
    if cat == "output" or (st.tied and cat == "token_embd"):
        return _output_type(shape, ftype, new)
    if ftype == "MXFP4_MOE":
        return "MXFP4" if len(shape) > 2 and shape[2] > 1 else "Q8_0"
    if cat == "token_embd":
        return _embd_type(ftype, new)
    if ftype in _IQ_LOW:
        return _low_iq_type(st, cat, v_like, ftype, new)
    if v_like:
        return _attn_v_type(st, ftype, new)
    if cat == "attn_k" and st.n_expert == 8:
        return "Q8_0"  # "for the 8-expert model, bumping this to Q8_0 trades just ~128MB"
    if cat in ("attn_k", "attn_q"):
        return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ftype, new)
    if cat == "ffn_down":
        return _ffn_down_type(st, name, ftype, new)
    if cat == "attn_output":
        if st.n_expert == 8:
            return "Q5_K" if ftype in _EIGHT_EXPERT_O else new
        return {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K", "IQ3_M": "Q4_K"}.get(ftype, new)
    if cat in ("ffn_gate", "ffn_up"):
        return _ffn_gate_up_type(st, cat, name, ftype, new)
    return new


# attn_output of an 8-expert model gets Q5_K for these file types (llama_tensor_get_type_impl)
_EIGHT_EXPERT_O = {"Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ3_S", "IQ3_M", "IQ4_XS"}


def _output_type(shape: tuple[int, ...], ftype: str, new: str) -> str:
    # The output matrix (or a tied model's token_embd, which serves as it) gets more bits.
    if ftype == "MXFP4_MOE" or shape[0] % GGML_TYPES[new][0]:
        return "Q8_0"
    if ftype in _IQ_LOW or ftype == "IQ3_XXS":
        return "Q5_K"
    return new if new == "Q8_0" else "Q6_K"


def _embd_type(ftype: str, new: str) -> str:
    # An untied token_embd is a row lookup: the lowest types get a cheap-to-dequantise one.
    if ftype in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
        return "Q2_K"
    if ftype in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
        return "IQ3_S"
    if ftype in ("TQ1_0", "TQ2_0", "Q2_0"):
        return "Q4_K"
    return new


def _low_iq_type(st: QuantizeState, cat: str, v_like: bool, ftype: str, new: str) -> str:
    # The 1- and 2-bit IQ file types protect attn_v, the first eighth of ffn_down and attn_output.
    iq2s = ftype in ("IQ2_S", "IQ2_M")
    if v_like:
        st.i_wv += 1
        return "Q4_K" if st.gqa >= 4 or st.n_expert >= 4 else ("IQ3_S" if iq2s else "Q2_K")
    if st.n_expert == 8 and cat == "attn_k":
        return "Q4_K"
    if cat == "ffn_down":
        st.i_down += 1
        return ("IQ3_S" if iq2s else "Q2_K") if st.i_down - 1 < st.n_layer // 8 else new
    if cat == "attn_output":
        if st.n_expert == 8:
            return "Q5_K"
        return "IQ2_XXS" if ftype in ("IQ1_S", "IQ1_M") else ("IQ3_S" if iq2s else new)
    return new


def _attn_v_type(st: QuantizeState, ftype: str, new: str) -> str:
    i, n, g = st.i_wv, st.n_attention_wv, st.gqa
    st.i_wv += 1
    if ftype == "Q2_K":
        new = "Q4_K" if g >= 4 else "Q3_K"
    elif ftype == "Q2_K_S" and g >= 4:
        new = "Q4_K"
    elif ftype == "IQ3_XXS":
        new = "Q4_K" if g >= 4 else ("IQ3_XXS" if st.imatrix else "IQ3_S")
    elif ftype in ("IQ3_XS", "IQ3_S") and g >= 4:
        new = "Q4_K"
    elif ftype == "IQ3_M":
        new = "Q4_K"
    elif ftype == "Q3_K_M":
        new = "Q5_K" if i < 2 else "Q4_K"
    elif ftype == "Q3_K_L":
        new = "Q5_K"
    elif ftype in ("IQ4_NL", "IQ4_XS") and g >= 4:
        new = "Q5_K"
    elif ftype in ("Q4_K_M", "Q5_K_M") and _use_more_bits(i, n):
        new = "Q6_K"
    elif ftype == "Q4_K_S" and i < 4:
        new = "Q5_K"
    if st.is_70b and new in ("Q3_K", "Q4_K"):
        # 8 query heads share each attn_v: the tensor is small, more bits cost little.
        new = "Q5_K"
    if st.n_expert == 8:
        new = "Q8_0"  # Mixtral-style 8-expert models: attn_v is small beside the experts
    return new


def _ffn_down_type(st: QuantizeState, name: str, ftype: str, new: str) -> str:
    i, n = st.layer(st.i_down, name), st.n_layer
    st.i_down += 1
    if ftype == "Q2_K":
        return "Q3_K"
    if ftype == "Q2_K_S":
        return "Q4_K" if i < n // 8 else new
    if ftype == "IQ3_XXS" and not st.imatrix:
        return "Q4_K" if i < n // 8 else "Q3_K"
    if ftype == "Q3_K_M":
        # the C++ reads `arch != FALCON || use_more_bits`: true for every non-Falcon model
        return "Q5_K" if i < n // 16 else "Q4_K"
    if ftype == "IQ3_M":
        return "Q4_K" if i < n // 8 or (st.n_expert == 8 and _use_more_bits(i, n)) else new
    if ftype == "Q3_K_L":
        return "Q5_K"
    if ftype == "Q4_K_M":
        return "Q6_K" if _use_more_bits(i, n) else new
    if ftype in ("IQ4_NL", "IQ4_XS") and i < n // 8 and not st.imatrix:
        return "Q5_K"
    if ftype == "Q5_K_M" and _use_more_bits(i, n):
        return "Q6_K"
    if ftype == "Q4_K_S" and i < n // 8:
        return "Q5_K"
    if ftype in ("Q4_0", "Q5_0") and st.imatrix and i < n // 8:
        return "Q4_1" if ftype == "Q4_0" else "Q5_1"
    return new


def _ffn_gate_up_type(st: QuantizeState, cat: str, name: str, ftype: str, new: str) -> str:
    i = st.layer(st.i_gate if cat == "ffn_gate" else st.i_up, name)
    if cat == "ffn_gate":
        st.i_gate += 1
    else:
        st.i_up += 1
    n = st.n_layer
    if ftype == "IQ3_XS" and n // 8 <= i < 7 * n // 8:
        return "IQ3_XXS"
    return new


def _fallback(new: str, ncols: int) -> str:
    # tensor_type_fallback: a row that is not a whole number of blocks gets a 32-block type, else F16.
    block = GGML_TYPES[new][0]
    if ncols % block == 0:
        return new
    ret = FALLBACK.get(new, new if block <= 32 else None)
    if ret is None:
        raise HomespecError(f"llama.cpp has no fallback for {new} with rows of {ncols}")
    return ret if ncols % GGML_TYPES[ret][0] == 0 else "F16"


def tensor_type(st: QuantizeState, name: str, shape: tuple[int, ...], ftype: str, default: str) -> str:
    """The ggml type llama.cpp's quantiser writes for weight `name` of an `ftype` file whose default
    type is `default`: the per-tensor rule, then the fallback for rows that are not whole blocks."""
    return _fallback(_mix_type(st, name, shape, ftype, default), shape[0])

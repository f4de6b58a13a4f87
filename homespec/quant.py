"""Per-tensor quantisation prediction: which ggml type llama.cpp gives each tensor, and its bytes.

A GGUF "Q4_K_M" file is a mix: llama.cpp's quantiser (src/llama-quant.cpp,
`llama_tensor_get_type_impl`) picks a type per tensor from its role, its layer and the model's
shape, then demotes types whose block does not divide the tensor's rows. The tables (block sizes,
file-type defaults, the fallback chain, short names) live in profiles/quants.toml; the rules that
depend on layer counters and shapes are the code below, in the same order as the C++ so the two
can be read side by side. docs/catalogue.md walks through an example.

Pure: tomllib only, no torch, no llama_cpp (the planner imports this).
"""

from __future__ import annotations

import math
import re
import tomllib
from functools import cache
from pathlib import Path

from homespec.errors import HomespecError, UsageError
from homespec.family_shapes import ALWAYS_TIED, FAMILY_ARCHS, LAYER_SHAPES
from homespec.types import ModelSpec, TensorInfo

_PACKAGE = Path(__file__).resolve().parent


def profiles_dir() -> Path:
    """The catalogue folder: the repository's profiles/ or the copy shipped in homespec/data/."""
    for folder in (_PACKAGE.parent / "profiles", _PACKAGE / "data" / "profiles"):
        if (folder / "quants.toml").is_file():
            return folder
    raise HomespecError(
        "the homespec catalogue (profiles/*.toml) is missing",
        hint="reinstall homespec; the TOML files ship in homespec/data/profiles",
    )


@cache
def _tables() -> dict:
    with open(profiles_dir() / "quants.toml", "rb") as f:
        return tomllib.load(f)


_T = _tables()

# name -> (elements per block, bytes per block), for every ggml type.
GGML_TYPES: dict[str, tuple[int, int]] = {n: (v["block"], v["bytes"]) for n, v in _T["types"].items()}
GGML_TYPE_IDS: dict[int, str] = {v["id"]: n for n, v in _T["types"].items()}
# llama.cpp file type name -> LLAMA_FTYPE_* id and the type most tensors start from.
FTYPE_IDS: dict[str, int] = {n: v["id"] for n, v in _T["ftypes"].items()}
_FTYPE_DEFAULT: dict[str, str] = {n: v["default"] for n, v in _T["ftypes"].items()}
_FALLBACK: dict[str, str] = dict(_T["fallback"])
_ALIASES: dict[str, str] = dict(_T["aliases"])

# Popular file types first, so error messages and pickers show the useful ones.
_POPULAR = ("Q4_K_M", "Q4_K_S", "Q5_K_M", "Q5_K_S", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
            "IQ4_XS", "IQ4_NL", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q2_K", "Q2_K_S", "IQ3_XXS", "IQ3_XS",
            "IQ3_S", "IQ3_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "F16", "BF16", "F32")
FILE_TYPES: tuple[str, ...] = _POPULAR + tuple(n for n in FTYPE_IDS if n not in _POPULAR)

EXL2_HEAD_BITS: int = _T["exl2"]["head_bits"]
# mode -> (bytes per K element, bytes per V element), fp16 group scales included.
EXL2_CACHE_BYTES_PER_ELEMENT: dict[str, tuple[float, float]] = {
    mode: tuple(
        bits / 8 + (2 / m["scale_group"] if m["scale_group"] else 0.0) for bits in (m["k_bits"], m["v_bits"])
    )
    for mode, m in _T["exl2"]["cache"].items()
}


def tensor_bytes(ggml_type: str, n_elements: int) -> int:
    """Bytes of `n_elements` stored as `ggml_type` (whole blocks only, as ggml stores them)."""
    try:
        block, size = GGML_TYPES[ggml_type]
    except KeyError:
        raise UsageError(f"unknown ggml type '{ggml_type}'", hint="one of: " + ", ".join(GGML_TYPES)) from None
    if n_elements % block:
        raise HomespecError(
            f"{n_elements} elements do not fill whole {ggml_type} blocks of {block}",
            hint="rows of a quantised tensor must be a multiple of the block size",
        )
    return n_elements // block * size


def _row_tensor_bytes(ggml_type: str, shape: tuple[int, ...]) -> int:
    # ggml quantises row by row (ne[0] is the row), so bytes = rows x row size.
    block, size = GGML_TYPES[ggml_type]
    return math.prod(shape[1:]) * (shape[0] // block) * size


_EXL2_RE = re.compile(r"^(?:exl2[-_ ]?)?(\d+(?:\.\d+)?)(?:[-_ ]?bpw)?(?:[-_ ]?exl2)?$")


def normalize_quant(text: str) -> str:
    """A user's quant name -> canonical: "q4" -> "Q4_K_M", "4.65bpw" -> "EXL2-4.65", "bf16" -> "BF16"."""
    raw = text.strip()
    low = raw.lower()
    if "exl2" in low or "bpw" in low:
        m = _EXL2_RE.match(low)
        if m and 1.0 <= float(m.group(1)) <= 16.0:
            return f"EXL2-{float(m.group(1)):g}"
        raise UsageError(f"cannot read an EXL2 bits-per-weight from '{text}'", hint="write e.g. exl2-4.65 or 4.65bpw")
    key = low.replace("-", "_")
    if key in _ALIASES:
        return _ALIASES[key]
    up = key.upper()
    if up in FTYPE_IDS:
        return up
    raise UsageError(
        f"unknown quantisation '{text}'",
        hint="one of: q2, q3, q4, q5, q6, q8, " + ", ".join(_POPULAR) + ", or EXL2 as exl2-4.65 / 4.65bpw",
    )


# ------------------------------------------------------------------------------------------------
# Tensor shapes, as llama.cpp's converter (convert_hf_to_gguf.py) writes them and src/models/<arch>.cpp
# loads them. Shapes are ggml order: ne[0] is the input (row) width.

# Mistral 7B / Nemo / Small convert to the llama architecture; Mistral Small 3.x to mistral3, whose
# dense layers are llama's (src/models/mistral3.cpp)
_ARCH_ALIASES = {"mistral": "llama", "mistral3": "llama"}
_ARCHS = ("llama", "qwen2", "qwen3", "gemma2", "gemma3", "phi3")


def _has_llama3_rope_freqs(model: ModelSpec) -> bool:
    # Llama 3.1+ ship rope_scaling {"rope_type": "llama3"}; the converter stores the per-dimension
    # factors as rope_freqs.weight. A ModelSpec does not carry rope_scaling, so recognise the
    # family by its tokenizer (128256 tokens), base 500000 and 128K context.
    return model.n_vocab == 128256 and (model.rope_theta or 0) == 500000.0 and model.n_ctx_train >= 131072


def model_tensor_shapes(model: ModelSpec) -> list[tuple[str, tuple[int, ...]]]:
    """GGUF tensor names and shapes for the model, in llama.cpp's loader order."""
    arch = _ARCH_ALIASES.get(model.arch, model.arch)
    if arch in LAYER_SHAPES:
        return _family_shapes(model, arch)
    if arch not in _ARCHS:
        raise HomespecError(
            f"homespec cannot predict the tensors of a '{model.arch}' model",
            hint="point --model at the GGUF file (its header lists the real tensors); known: "
                 + ", ".join(_ARCHS + FAMILY_ARCHS),
        )
    d, hd, hdv = model.n_embd, model.head_dim, model.head_dim_v or model.head_dim
    q, k, v = model.n_head * hd, model.n_head_kv * hd, model.n_head_kv * hdv
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (d, model.n_vocab)), ("output_norm.weight", (d,))]
    if not model.tied_embeddings and arch != "gemma2":  # Gemma 2 always reuses token_embd as output
        out.append(("output.weight", (d, model.n_vocab)))
    if arch == "llama" and _has_llama3_rope_freqs(model):
        out.append(("rope_freqs.weight", (hd // 2,)))
    for i in range(model.n_layer):
        b = f"blk.{i}."
        layer = [(b + "attn_norm.weight", (d,)), (b + "ffn_norm.weight", (d,)),
                 (b + "attn_output.weight", (model.n_head * hdv, d)), (b + "ffn_down.weight", (model.n_ff, d))]
        if arch == "phi3":  # fused projections: qkv in one matrix, gate+up in one matrix
            layer += [(b + "attn_qkv.weight", (d, q + k + v)), (b + "ffn_up.weight", (d, 2 * model.n_ff))]
        else:
            layer += [(b + "attn_q.weight", (d, q)), (b + "attn_k.weight", (d, k)), (b + "attn_v.weight", (d, v)),
                      (b + "ffn_gate.weight", (d, model.n_ff)), (b + "ffn_up.weight", (d, model.n_ff))]
        if arch == "qwen2":
            layer += [(b + "attn_q.bias", (q,)), (b + "attn_k.bias", (k,)), (b + "attn_v.bias", (v,))]
        if arch in ("qwen3", "gemma3"):
            layer += [(b + "attn_q_norm.weight", (hd,)), (b + "attn_k_norm.weight", (hd,))]
        if arch in ("gemma2", "gemma3"):
            layer += [(b + "post_attention_norm.weight", (d,)), (b + "post_ffw_norm.weight", (d,))]
        out += layer
    return sorted(out, key=_loader_order)


def _family_shapes(model: ModelSpec, arch: str) -> list[tuple[str, tuple[int, ...]]]:
    d = model.n_embd
    out: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (d, model.n_vocab)), ("output_norm.weight", (d,))]
    if not model.tied_embeddings and arch not in ALWAYS_TIED:
        out.append(("output.weight", (d, model.n_vocab)))
    layer = LAYER_SHAPES[arch]
    for i in range(model.n_layer):
        out += layer(model, i)
    return sorted(out, key=_loader_order)


def _loader_order(item: tuple[str, tuple[int, ...]]) -> tuple[int, str]:
    # llama_model_loader.weights_map sorts by block number (non-block tensors first), then by name;
    # the quantiser's per-layer counters advance in this order.
    m = re.match(r"blk\.(\d+)\.", item[0])
    return (int(m.group(1)) if m else -1, item[0])


def _layer_of(name: str) -> int | None:
    m = re.match(r"blk\.(\d+)\.", name)
    return int(m.group(1)) if m else None


def n_params(model: ModelSpec) -> int:
    """Parameter count from the architecture (the tied output counted once, as HF does)."""
    return sum(math.prod(s) for n, s in model_tensor_shapes(model) if n != "rope_freqs.weight")


# ------------------------------------------------------------------------------------------------
# The quantiser's per-tensor choice (llama_tensor_get_type + llama_tensor_get_type_impl).

_IQ_LOW = {"IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"}
_NEEDS_IMATRIX = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ1_S", "IQ1_M", "IQ3_XXS", "Q2_K_S"}


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


def _allows_quantization(name: str, shape: tuple[int, ...]) -> bool:
    # tensor_allows_quantization: only 2-D/3-D weights, never norms, MoE routers or SSM conv kernels.
    return (len(shape) >= 2 and name.endswith("weight") and "_norm.weight" not in name
            and "ffn_gate_inp.weight" not in name and "ssm_conv1d" not in name)


def _use_more_bits(i: int, n: int) -> bool:
    # The first and last eighth of the layers, and every third layer between, get more bits.
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


class _State:
    """Counters the quantiser advances tensor by tensor (quantize_state_impl)."""

    def __init__(self, shapes: list[tuple[str, tuple[int, ...]]], model: ModelSpec, imatrix: bool):
        self.n_attention_wv = sum(_category(n) in ("attn_v", "attn_qkv", "attn_kv_b") for n, _ in shapes)
        self.tied = not any(n == "output.weight" for n, _ in shapes)
        self.n_layer = model.n_layer  # n_ffn_down = n_ffn_gate = n_ffn_up = n_layer_all
        self.gqa = model.n_head // max(model.n_head_kv, 1)
        arch = _ARCH_ALIASES.get(model.arch, model.arch)
        # LLM_TYPE_70B (src/models/llama.cpp, qwen2.cpp): 80 layers with GQA. Its attn_v gets Q5_K.
        self.is_70b = model.n_layer == 80 and (arch == "qwen2" or (arch == "llama" and model.n_head != model.n_head_kv))
        self.imatrix = imatrix
        self.i_wv = self.i_down = self.i_gate = self.i_up = 0
        self.n_expert = model.n_expert

    def layer(self, counter: int, name: str) -> int:
        """layer_info: an MoE model's FFN tensors take their layer from the name (experts are not
        stored in layer order), a dense model's from the category's running counter."""
        if self.n_expert > 1:
            found = _layer_of(name)
            return counter if found is None else found
        return counter


def _mix_type(st: _State, name: str, shape: tuple[int, ...], ftype: str, new: str) -> str:
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


def _low_iq_type(st: _State, cat: str, v_like: bool, ftype: str, new: str) -> str:
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


def _attn_v_type(st: _State, ftype: str, new: str) -> str:
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


def _ffn_down_type(st: _State, name: str, ftype: str, new: str) -> str:
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


def _ffn_gate_up_type(st: _State, cat: str, name: str, ftype: str, new: str) -> str:
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
    ret = _FALLBACK.get(new, new if block <= 32 else None)
    if ret is None:
        raise HomespecError(f"llama.cpp has no fallback for {new} with rows of {ncols}")
    return ret if ncols % GGML_TYPES[ret][0] == 0 else "F16"


def _converted_type(model: ModelSpec, name: str) -> str | None:
    """The quantised type a tensor already has in the converted GGUF, which every published file keeps.

    gpt-oss ships its experts in MXFP4 and the converter writes them so (conversion/gpt_oss.py,
    raw_dtype MXFP4). llama-quantize refuses to requantize a quantised tensor unless told to
    (src/llama-quant.cpp, "requantizing from type %s is disabled"), and re-quantising MXFP4 to a
    K-quant only loses precision, so the published F16 / Q4_K_M / Q8_0 files keep MXFP4 experts:
    unsloth's gpt-oss-20b F16 is 13.8 GB and Q4_K_M 11.6 GB, not the 41.9 / 15.8 GB that
    re-quantised experts would make (profiles/models/gpt-oss.toml)."""
    if _ARCH_ALIASES.get(model.arch, model.arch) == "gpt-oss" and "_exps.weight" in name:
        return "MXFP4"
    return None


def predict_tensors(model: ModelSpec, ftype: str, *, imatrix: bool | None = None,
                    converted: bool = True) -> tuple[TensorInfo, ...]:
    """Each tensor's ggml type and exact bytes when llama.cpp quantises the model to `ftype`.

    `imatrix` says whether an importance matrix was used (it changes a few IQ3/IQ4 choices);
    by default it is assumed exactly for the file types that cannot be made without one.
    `converted`: the source is llama.cpp's conversion of the published checkpoint, so tensors the
    converter writes already quantised keep that type (gpt-oss's MXFP4 experts, _converted_type);
    False for a source written in float throughout, which the quantiser types like any other.
    """
    name = normalize_quant(ftype)
    if name.startswith("EXL2-"):
        return exl2_tensors(model, float(name.removeprefix("EXL2-")))
    default = _FTYPE_DEFAULT[name]
    shapes = model_tensor_shapes(model)
    st = _State(shapes, model, name in _NEEDS_IMATRIX if imatrix is None else imatrix)
    quantized = GGML_TYPES[default][0] > 1  # F16/BF16/F32 files copy every 2-D weight to that type
    out = []
    for tname, shape in shapes:
        kept = _converted_type(model, tname) if converted else None
        if not _allows_quantization(tname, shape):
            ggml_type = "F32"  # 1-D norms, biases and rope factors stay as converted: F32
        elif kept is not None:
            ggml_type = kept
        elif not quantized:
            ggml_type = default
        else:
            ggml_type = _fallback(_mix_type(st, tname, shape, name, default), shape[0])
        out.append(TensorInfo(tname, shape, ggml_type, _row_tensor_bytes(ggml_type, shape), _layer_of(tname)))
    return tuple(out)


# ------------------------------------------------------------------------------------------------
# EXL2 (exllamav2): linear layers at an average bits-per-weight, the head at head_bits, embeddings fp16.


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
            out.append(TensorInfo(name, shape, "EXL2", math.ceil(n * bpw / 8), _layer_of(name)))
        else:
            out.append(TensorInfo(name, shape, "F16", n * 2, _layer_of(name)))
    return tuple(out)


def exl2_cache_bytes(mode: str, n_layer: int, n_kv_heads: int, head_dim: int, n_tokens: int,
                     batch: int = 1, n_devices: int = 1) -> int:
    """Bytes of an exllamav2 KV cache (ExLlamaV2Cache / _8bit / _Q4 / _Q6 / _Q8) for `n_tokens`.

    Includes the fp16 scales of the Q modes and the fp16 K/V temp buffers quantised caches keep on
    each device.
    """
    key = mode.upper().removeprefix("CACHE_")
    if key not in _T["exl2"]["cache"]:
        raise UsageError(f"unknown exllamav2 cache mode '{mode}'", hint="one of: " + ", ".join(_T["exl2"]["cache"]))
    m = _T["exl2"]["cache"][key]
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

"""The tensors of a quantised file of a ModelSpec: each tensor's ggml type and exact bytes for a
llama.cpp file type (or an EXL2 rate), from its predicted shapes and llama.cpp's per-tensor rules.

Pure: no torch, no llama_cpp (the planner imports this).
"""

from __future__ import annotations

from homespec.quant.exl2 import exl2_tensors
from homespec.quant.names import normalize_quant
from homespec.quant.rules import NEEDS_IMATRIX, QuantizeState, allows_quantization, tensor_type
from homespec.quant.shapes import base_arch, layer_of, model_tensor_shapes
from homespec.quant.tables import FTYPE_DEFAULT, GGML_TYPES, row_tensor_bytes
from homespec.types import ModelSpec, TensorInfo


def _converted_type(model: ModelSpec, name: str) -> str | None:
    """The quantised type a tensor already has in the converted GGUF, which every published file keeps.

    gpt-oss ships its experts in MXFP4 and the converter writes them so (conversion/gpt_oss.py,
    raw_dtype MXFP4). llama-quantize refuses to requantize a quantised tensor unless told to
    (src/llama-quant.cpp, "requantizing from type %s is disabled"), and re-quantising MXFP4 to a
    K-quant only loses precision, so the published F16 / Q4_K_M / Q8_0 files keep MXFP4 experts:
    unsloth's gpt-oss-20b F16 is 13.8 GB and Q4_K_M 11.6 GB, not the 41.9 / 15.8 GB that
    re-quantised experts would make (profiles/models/gpt-oss.toml)."""
    if base_arch(model.arch) == "gpt-oss" and "_exps.weight" in name:
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
    default = FTYPE_DEFAULT[name]
    shapes = model_tensor_shapes(model)
    st = QuantizeState(shapes, model, name in NEEDS_IMATRIX if imatrix is None else imatrix)
    quantized = GGML_TYPES[default][0] > 1  # F16/BF16/F32 files copy every 2-D weight to that type
    out = []
    for tname, shape in shapes:
        kept = _converted_type(model, tname) if converted else None
        if not allows_quantization(tname, shape):
            ggml_type = "F32"  # 1-D norms, biases and rope factors stay as converted: F32
        elif kept is not None:
            ggml_type = kept
        elif not quantized:
            ggml_type = default
        else:
            ggml_type = tensor_type(st, tname, shape, name, default)
        out.append(TensorInfo(tname, shape, ggml_type, row_tensor_bytes(ggml_type, shape), layer_of(tname)))
    return tuple(out)

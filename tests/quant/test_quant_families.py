"""Per-tensor type prediction for the MoE families against llama.cpp's own quantiser.

A tiny F32 GGUF of each family (tests/tiny_families.py, 256-wide so K-quants need no fallback) is
quantised by the vendored llama.cpp (llama_model_quantize); every tensor's type must be the one
homespec.quant predicts for the same shape: expert layers taken from the tensor name, the
8-expert rules, MXFP4_MOE's experts-vs-rest split.
"""

from __future__ import annotations

import dataclasses

import pytest

from homespec.formats.gguf import read_gguf_header
from homespec.formats.gguf_model import model_spec_from_gguf
from homespec.quant.predict import predict_tensors

WIDE = dict(n_embd=256, n_ff_exp=256)
CASES = [
    ("qwen3moe", dict(WIDE, n_head=4, head_dim=64, n_layer=8)),
    ("qwen3moe", dict(WIDE, n_head=4, head_dim=64, n_layer=8, n_expert=8)),  # Mixtral-style 8 experts
    ("deepseek2", dict(WIDE, n_ff=512, n_layer=4)),
    ("gpt-oss", dict(WIDE, n_head=4, head_dim=64)),
    ("glm4", dict(n_embd=256, n_ff=512, n_head=4, head_dim=64, n_layer=8)),  # dense: fused 2 x n_ff ffn_up
]


@pytest.mark.slow
@pytest.mark.parametrize("family,shape", CASES, ids=["qwen3moe", "qwen3moe-8x", "deepseek2", "gpt-oss", "glm4"])
@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q3_K_M", "MXFP4_MOE"])
def test_predicted_types_match_llamacpp_quantize(tmp_path, family, shape, ftype):
    from tiny_families import make_family_gguf
    from tiny_models import _quantize

    src = make_family_gguf(tmp_path / "f32.gguf", family, **shape)
    dst = tmp_path / f"{ftype}.gguf"
    _quantize(src, dst, ftype)
    real = {t.name: (t.ggml_type, t.n_bytes) for t in read_gguf_header(dst).tensors}
    spec = dataclasses.replace(model_spec_from_gguf(read_gguf_header(src)), tensors=None)
    # the tiny source is F32 throughout (a real gpt-oss conversion writes its experts in MXFP4)
    predicted = {t.name: (t.ggml_type, t.n_bytes) for t in predict_tensors(spec, ftype, converted=False)}
    assert predicted == real


@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q8_0", "F16", "MXFP4_MOE"])
def test_gpt_oss_experts_keep_the_converters_mxfp4(ftype):
    """The converter writes gpt-oss's experts in MXFP4 and llama-quantize does not requantize a
    quantised tensor, so every file type keeps them; the other weights follow the file type."""
    from homespec.catalog import load_catalog

    spec = load_catalog().entry("gpt-oss-20b").spec
    kept = predict_tensors(spec, ftype)
    floats = predict_tensors(spec, ftype, converted=False)  # an all-float source re-quantises them
    exps = [t for t in kept if t.name.endswith("_exps.weight")]
    assert exps and all(t.ggml_type == "MXFP4" for t in exps)
    assert [t for t in kept if "_exps." not in t.name] == [t for t in floats if "_exps." not in t.name]
    if ftype != "MXFP4_MOE":
        assert sum(t.n_bytes for t in floats) > sum(t.n_bytes for t in kept)

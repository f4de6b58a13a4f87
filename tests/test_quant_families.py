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
from homespec.quant import predict_tensors

WIDE = dict(n_embd=256, n_ff_exp=256)
CASES = [
    ("qwen3moe", dict(WIDE, n_head=4, head_dim=64, n_layer=8)),
    ("qwen3moe", dict(WIDE, n_head=4, head_dim=64, n_layer=8, n_expert=8)),  # Mixtral-style 8 experts
    ("deepseek2", dict(WIDE, n_ff=512, n_layer=4)),
    ("gpt-oss", dict(WIDE, n_head=4, head_dim=64)),
]


@pytest.mark.slow
@pytest.mark.parametrize("family,shape", CASES, ids=["qwen3moe", "qwen3moe-8x", "deepseek2", "gpt-oss"])
@pytest.mark.parametrize("ftype", ["Q4_K_M", "Q3_K_M", "MXFP4_MOE"])
def test_predicted_types_match_llamacpp_quantize(tmp_path, family, shape, ftype):
    from tiny_families import make_family_gguf
    from tiny_models import _quantize

    src = make_family_gguf(tmp_path / "f32.gguf", family, **shape)
    dst = tmp_path / f"{ftype}.gguf"
    _quantize(src, dst, ftype)
    real = {t.name: (t.ggml_type, t.n_bytes) for t in read_gguf_header(dst).tensors}
    spec = dataclasses.replace(model_spec_from_gguf(read_gguf_header(src)), tensors=None)
    predicted = {t.name: (t.ggml_type, t.n_bytes) for t in predict_tensors(spec, ftype)}
    assert predicted == real

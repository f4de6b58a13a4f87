"""homespec.quant: ggml type table, quant names, tensor layouts and llama.cpp's per-tensor choices."""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.catalog import load_catalog
from homespec.errors import HomespecError, UsageError
from homespec.quant.exl2 import EXL2_CACHE_BYTES_PER_ELEMENT, exl2_cache_bytes, exl2_tensors
from homespec.quant.names import normalize_quant
from homespec.quant.predict import predict_tensors
from homespec.quant.shapes import model_tensor_shapes
from homespec.quant.tables import FILE_TYPES, FTYPE_IDS, GGML_TYPES, tensor_bytes
from homespec.types import ModelSpec


def _spec(name: str) -> ModelSpec:
    return load_catalog().entry(name).spec


def _by_name(tensors):
    return {t.name: t for t in tensors}


def test_ggml_types_cover_every_type_and_match_gguf_py():
    from gguf.constants import GGML_QUANT_SIZES

    for t, (block, size) in GGML_QUANT_SIZES.items():
        if t.name == "Q8_1":  # gguf 0.19 still has the old float-scale layout (40 B); ggml-common.h says 36
            assert GGML_TYPES["Q8_1"] == (32, 36)
            continue
        assert GGML_TYPES[t.name] == (block, size), t.name
    for name in ("F32", "F16", "BF16", "Q4_0", "Q8_1", "Q2_K", "Q8_K", "IQ1_S", "IQ4_XS", "TQ1_0", "TQ2_0",
                 "MXFP4", "I8", "F64"):
        assert name in GGML_TYPES


def test_tensor_bytes():
    assert tensor_bytes("Q4_K", 4096 * 4096) == 4096 * 4096 // 256 * 144
    assert tensor_bytes("F32", 576) == 2304
    with pytest.raises(HomespecError):
        tensor_bytes("Q4_K", 576)
    with pytest.raises(UsageError):
        tensor_bytes("Q4_Z", 256)


@pytest.mark.parametrize("text,want", [
    ("q4", "Q4_K_M"), ("q4_k_m", "Q4_K_M"), ("Q5", "Q5_K_M"), ("q8", "Q8_0"), ("q6", "Q6_K"), ("q3", "Q3_K_M"),
    ("q2", "Q2_K"), ("f16", "F16"), ("bf16", "BF16"), ("iq4_xs", "IQ4_XS"), ("Q4-K-S", "Q4_K_S"),
    ("exl2-4.65", "EXL2-4.65"), ("4.65bpw", "EXL2-4.65"), ("EXL2_6.0", "EXL2-6"),
])
def test_normalize_quant(text, want):
    assert normalize_quant(text) == want


def test_normalize_quant_rejects_with_the_valid_names():
    with pytest.raises(UsageError) as e:
        normalize_quant("q4_z")
    assert "Q4_K_M" in e.value.hint and "exl2" in e.value.hint
    with pytest.raises(UsageError):
        normalize_quant("exl2-99")
    assert FILE_TYPES[0] == "Q4_K_M" and set(FILE_TYPES) == set(FTYPE_IDS)


def test_shapes_per_architecture():
    qwen2 = dict(model_tensor_shapes(_spec("qwen2.5-7b")))
    assert qwen2["blk.0.attn_q.bias"] == (3584,) and qwen2["blk.0.attn_k.bias"] == (512,)
    assert qwen2["output.weight"] == (3584, 152064)
    qwen3 = dict(model_tensor_shapes(_spec("qwen3-8b")))
    assert qwen3["blk.5.attn_q_norm.weight"] == (128,) and "blk.5.attn_q.bias" not in qwen3
    gemma2 = dict(model_tensor_shapes(_spec("gemma-2-9b")))
    assert "output.weight" not in gemma2 and gemma2["blk.0.post_ffw_norm.weight"] == (3584,)
    gemma3 = dict(model_tensor_shapes(_spec("gemma-3-27b")))
    assert gemma3["blk.0.attn_q.weight"] == (5376, 4096) and gemma3["blk.0.attn_k_norm.weight"] == (128,)
    phi = dict(model_tensor_shapes(_spec("phi-4")))
    assert phi["blk.0.attn_qkv.weight"] == (5120, 5120 + 2 * 1280) and phi["blk.0.ffn_up.weight"] == (5120, 35840)
    llama = dict(model_tensor_shapes(_spec("llama-3.1-8b")))
    assert llama["rope_freqs.weight"] == (64,) and llama["blk.31.ffn_down.weight"] == (14336, 4096)
    nemo = dict(model_tensor_shapes(_spec("mistral-nemo-12b")))
    assert nemo["blk.0.attn_q.weight"] == (5120, 4096) and nemo["blk.0.attn_output.weight"] == (4096, 5120)


@pytest.mark.slow
def test_shapes_match_the_real_smollm2_file(smollm2_weights):
    import gguf

    reader = gguf.GGUFReader(smollm2_weights)
    real = [(t.name, tuple(int(x) for x in t.shape)) for t in reader.tensors]
    assert sorted(real) == sorted(model_tensor_shapes(_spec("smollm2-135m")))


def test_q4_k_m_rules_on_llama_3_1_8b():
    t = _by_name(predict_tensors(_spec("llama-3.1-8b"), "Q4_K_M"))
    assert t["output.weight"].ggml_type == "Q6_K"
    assert t["token_embd.weight"].ggml_type == "Q4_K"  # untied: the embedding keeps the default type
    assert t["blk.0.attn_norm.weight"].ggml_type == "F32"
    # use_more_bits(i, 32): i < 4, i >= 28, or (i - 4) % 3 == 2
    more = {i for i in range(32) if i < 4 or i >= 28 or (i - 4) % 3 == 2}
    for i in range(32):
        want = "Q6_K" if i in more else "Q4_K"
        assert t[f"blk.{i}.attn_v.weight"].ggml_type == want
        assert t[f"blk.{i}.ffn_down.weight"].ggml_type == want
        assert t[f"blk.{i}.attn_q.weight"].ggml_type == "Q4_K"


def test_70b_attn_v_and_gqa_rules():
    t = _by_name(predict_tensors(_spec("llama-3.1-70b"), "Q4_K_M"))
    assert {t[f"blk.{i}.attn_v.weight"].ggml_type for i in range(80)} == {"Q5_K", "Q6_K"}
    q2 = _by_name(predict_tensors(_spec("llama-3.1-8b"), "Q2_K"))  # GQA 4: attn_v gets Q4_K
    assert q2["blk.3.attn_v.weight"].ggml_type == "Q4_K" and q2["blk.3.ffn_down.weight"].ggml_type == "Q3_K"
    assert q2["blk.3.attn_output.weight"].ggml_type == "Q3_K" and q2["blk.3.ffn_up.weight"].ggml_type == "Q2_K"


def test_rows_not_multiple_of_256_fall_back():
    t = _by_name(predict_tensors(_spec("smollm2-135m"), "Q4_K_M"))  # width 576 = 2.25 x 256
    assert t["token_embd.weight"].ggml_type == "Q8_0"  # tied output rule
    assert t["blk.1.attn_q.weight"].ggml_type == "Q5_0"  # Q4_K -> Q5_0
    assert t["blk.0.attn_v.weight"].ggml_type == "Q8_0"  # Q6_K -> Q8_0
    assert t["blk.4.ffn_down.weight"].ggml_type == "Q4_K"  # rows of 1536 = 6 x 256 stay


def test_llama_3_1_70b_q4_k_m_matches_the_published_file():
    # bartowski/Meta-Llama-3.1-70B-Instruct-GGUF: Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf is 42.5 GB
    # (tensor data + ~10 MB of metadata, mostly the vocabulary).
    total = sum(t.n_bytes for t in predict_tensors(_spec("llama-3.1-70b"), "Q4_K_M"))
    assert abs(total - 42.5e9) / 42.5e9 < 0.005


@settings(max_examples=40, deadline=None)
@given(
    n_layer=st.integers(1, 48), width=st.sampled_from([256, 576, 896, 1000, 2048, 3072]),
    kv=st.sampled_from([1, 2, 4, 8]), ff_mult=st.integers(1, 6),
    ftype=st.sampled_from(["Q4_K_M", "Q5_K_S", "Q3_K_L", "Q2_K", "IQ4_XS", "IQ2_M", "Q8_0", "IQ3_XS"]),
    tied=st.booleans(),
)
def test_every_prediction_is_storable(n_layer, width, kv, ff_mult, ftype, tied):
    spec = ModelSpec(name="x", arch="llama", n_layer=n_layer, n_embd=width, n_head=8, n_head_kv=kv,
                     head_dim=64, n_ff=width * ff_mult, n_vocab=1000, n_ctx_train=4096, tied_embeddings=tied)
    tensors = predict_tensors(spec, ftype)
    assert len(tensors) == len(model_tensor_shapes(spec))
    for t in tensors:
        block = GGML_TYPES[t.ggml_type][0]
        assert t.shape[0] % block == 0, (t.name, t.ggml_type)  # the row must hold whole blocks
        assert t.n_bytes == tensor_bytes(t.ggml_type, t.n_elements)


# Real shapes whose rules differ: tied and untied, GQA 3 to 8, the 80-layer "70B" attn_v rule on
# llama and qwen2, sliding-window Gemma, Phi, Qwen3.
CHOICE_MODELS = ("smollm2-135m", "llama-3.1-8b", "llama-3.1-70b", "qwen2.5-72b", "qwen2.5-7b", "gemma-2-9b",
                 "gemma-3-27b", "phi-4", "mistral-7b", "qwen3-8b", "deepseek-r1-distill-qwen-1.5b")
CHOICES_FILE = Path(__file__).parents[1] / "data" / "quant_choices.json"


def _choices() -> dict[str, str]:
    """sha256 (16 hex) of every tensor's `name=type`, per model, file type and imatrix setting; a
    file type llama.cpp cannot make for the model records its error instead."""
    out = {}
    for m in CHOICE_MODELS:
        spec = _spec(m)
        for ftype in (f for f in FILE_TYPES if not f.startswith("EXL2")):
            for imatrix in (None, True, False):
                try:
                    text = "\n".join(f"{t.name}={t.ggml_type}" for t in predict_tensors(spec, ftype, imatrix=imatrix))
                except HomespecError as e:
                    text = f"{type(e).__name__}: {e}"
                out[f"{m} {ftype} {imatrix}"] = hashlib.sha256(text.encode()).hexdigest()[:16]
    return out


def write_choices() -> None:
    """After a deliberate change of the rules: `cd tests && python -c 'import test_quant as t; t.write_choices()'`."""
    CHOICES_FILE.write_text(json.dumps(_choices(), indent=0, sort_keys=True))


def test_every_per_tensor_choice_is_as_recorded():
    """The quantiser's choice for every tensor of several real models, for every file type, is the
    one recorded in tests/data/quant_choices.json (written from the rules as they were checked
    against llama.cpp): a refactoring of _mix_type keeps every choice."""
    want = json.loads(CHOICES_FILE.read_text())
    got = _choices()
    assert set(got) == set(want)
    changed = sorted(k for k in want if got[k] != want[k])
    assert not changed, f"{len(changed)} (model, file type, imatrix) changed, e.g. {changed[:4]}"


def test_exl2_layout():
    spec = _spec("mistral-7b")
    t = _by_name(exl2_tensors(spec, 4.65))
    assert t["token_embd.weight"].ggml_type == "F16"
    assert t["token_embd.weight"].n_bytes == 32768 * 4096 * 2
    assert t["output.weight"].n_bytes == math.ceil(32768 * 4096 * 6 / 8)
    q = t["blk.0.attn_q.weight"]
    assert q.ggml_type == "EXL2" and q.n_bytes == math.ceil(4096 * 4096 * 4.65 / 8)
    tied = _by_name(exl2_tensors(_spec("qwen2.5-3b"), 5.0, head_bits=8))
    assert tied["output.weight"].n_bytes == 151936 * 2048  # tied models still get a quantised head


def test_exl2_cache_modes():
    assert EXL2_CACHE_BYTES_PER_ELEMENT["FP16"] == (2.0, 2.0)
    assert EXL2_CACHE_BYTES_PER_ELEMENT["Q4"] == (0.5625, 0.5625)  # 4 bits + fp16 per 32
    assert EXL2_CACHE_BYTES_PER_ELEMENT["Q6"] == (1.0625, 0.5625)  # K at 8 bits, V at 4
    assert exl2_cache_bytes("FP16", 32, 8, 128, 1000) == 32 * 1000 * 1024 * 2 * 2
    q4 = exl2_cache_bytes("Q4", 32, 8, 128, 1000)
    store = 32 * 1000 * 1024 * 2 * (0.5 + 2 / 32)
    temp = 2 * 1000 * 1024 * 2
    assert q4 == store + temp
    with pytest.raises(UsageError):
        exl2_cache_bytes("Q3", 1, 1, 64, 10)


# --------------------------------------------------------------------------------------------------
# Against llama.cpp's own quantiser: requantise the embedded SmolLM2 file and compare every tensor.

QUANT_FILE_TYPES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q3_K_M", "Q2_K", "IQ4_XS"]


@pytest.fixture(scope="session")
def smollm2_weights(smollm2_path, tmp_path_factory):
    """The embedded SmolLM2 GGUF without its tokenizer arrays.

    GGUFReader spends ~9 s on this CPU turning 49k tokens and merges into arrays; the quantiser only
    reads hyperparameters and tensors, so the copy quantises identically and reads in a fraction of
    a second.
    """
    import gguf

    reader = gguf.GGUFReader(smollm2_path)
    out = tmp_path_factory.mktemp("smollm2") / "smollm2-weights.gguf"
    writer = gguf.GGUFWriter(out, arch="llama")
    for f in reader.fields.values():
        if f.name.startswith(("GGUF.", "tokenizer.", "general.architecture")):
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


@pytest.fixture(scope="session")
def quantised_smollm2(smollm2_weights, tmp_path_factory):
    """ftype -> path of the SmolLM2 GGUF requantised by llama.cpp (made on first use)."""
    llama_cpp = pytest.importorskip("llama_cpp")
    folder = tmp_path_factory.mktemp("quantised")
    made: dict[str, object] = {}
    quiet = llama_cpp.llama_log_callback(lambda level, text, user: None)  # keep a reference
    llama_cpp.llama_log_set(quiet, ctypes.c_void_p(0))

    def make(ftype: str):
        if ftype not in made:
            out = folder / f"smollm2-{ftype}.gguf"
            params = llama_cpp.llama_model_quantize_default_params()
            params.ftype = FTYPE_IDS[ftype]
            params.allow_requantize = True
            params.nthread = 2
            rc = llama_cpp.llama_model_quantize(str(smollm2_weights).encode(), str(out).encode(), ctypes.byref(params))
            assert rc == 0, f"llama_model_quantize({ftype}) returned {rc}"
            made[ftype] = out
        return made[ftype]

    yield make
    llama_cpp.llama_log_set(llama_cpp.llama_log_callback(0), ctypes.c_void_p(0))
    del quiet


@pytest.mark.slow
@pytest.mark.parametrize("ftype", QUANT_FILE_TYPES)
def test_predict_tensors_matches_llama_cpp_quantiser(ftype, quantised_smollm2):
    import gguf

    reader = gguf.GGUFReader(quantised_smollm2(ftype))
    real = {t.name: (t.tensor_type.name, int(t.n_bytes)) for t in reader.tensors}
    pred = {t.name: (t.ggml_type, t.n_bytes) for t in predict_tensors(_spec("smollm2-135m"), ftype)}
    assert real.keys() == pred.keys()
    wrong = {n: (real[n][0], pred[n][0]) for n in real if real[n][0] != pred[n][0]}
    assert not wrong, f"{ftype}: (llama.cpp, predicted) types differ: {dict(list(wrong.items())[:6])}"
    total_real, total_pred = sum(v[1] for v in real.values()), sum(v[1] for v in pred.values())
    assert abs(total_pred - total_real) <= 0.01 * total_real


@pytest.mark.slow
@pytest.mark.parametrize("ftype", ["Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_M"])
def test_gqa4_mix_matches_llama_cpp_quantiser(tmp_path, ftype):
    """A Mistral-7B-shaped tiny model (4 query heads per KV head, 256-wide rows so K-quants need no
    fallback): the GQA >= 4 branches of the mix (attn_v raised to Q4_K at Q2_K) that SmolLM2's 3 do not reach."""
    import dataclasses

    from tiny_models import _quantize, make_tiny_gguf

    from homespec.formats.gguf import read_gguf_header
    from homespec.formats.gguf_model import model_spec_from_gguf

    src = make_tiny_gguf(tmp_path / "f32.gguf", n_layer=8, n_embd=256, n_head=8, n_head_kv=2, n_ff=512, tied=False)
    dst = tmp_path / f"{ftype}.gguf"
    _quantize(src, dst, ftype)
    real = {t.name: (t.ggml_type, t.n_bytes) for t in read_gguf_header(dst).tensors}
    spec = dataclasses.replace(model_spec_from_gguf(read_gguf_header(src)), tensors=None)
    assert {t.name: (t.ggml_type, t.n_bytes) for t in predict_tensors(spec, ftype, imatrix=False)} == real

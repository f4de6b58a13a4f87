"""Every head layout homespec reads becomes llama.cpp's eagle3 GGUF (homespec.backends.llamacpp.head_convert):
round trips of each layout at reduced width with the real key names, the cache, q8_0, a GGUF given
directly, the EAGLE-3 twin for a llama.cpp without the patch, and no torch anywhere on the way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from homespec.backends.llamacpp.exports import PATCH_FEATURES
from homespec.backends.llamacpp.head_convert import head_gguf
from homespec.errors import HomespecError, UsageError
from tiny_heads import make_head_dir

N_LAYER, H, V, DV = 8, 64, 49152, 512
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    """An 8-layer random Llama GGUF with the real SmolLM2 tokenizer (tests/tiny_models.py)."""
    from tiny_models import make_tiny_gguf

    return make_tiny_gguf(tmp_path_factory.mktemp("target") / "tiny.gguf", n_layer=N_LAYER, n_embd=H)


def read_gguf(path: Path) -> tuple[dict, dict[str, np.ndarray], dict[str, str]]:
    """(metadata, tensors as float32 / int64 in numpy order, ggml type names) through homespec's header reader."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    from homespec.formats.gguf import read_gguf_header
    from homespec.nets.config import tensor_offsets

    header = read_gguf_header(path)
    offsets, raw = tensor_offsets(header), np.memmap(path, dtype=np.uint8, mode="r")
    arrays, types = {}, {}
    for t in header.tensors:
        data = np.asarray(raw[offsets[t.name]: offsets[t.name] + t.n_bytes])
        shape = tuple(reversed(t.shape))
        if t.ggml_type == "I64":
            arrays[t.name] = data.view(np.int64).reshape(shape)
        else:
            rows = t.n_elements // t.shape[0]
            arrays[t.name] = dequantize(data.reshape(rows, -1), GGMLQuantizationType[t.ggml_type]).reshape(shape)
        types[t.name] = t.ggml_type
    return header.metadata, arrays, types


_NAMES = {"midlayer.input_layernorm.weight": "blk.0.attn_norm.weight", "midlayer.hidden_norm.weight": "blk.0.attn_norm_2.weight",
          "midlayer.self_attn.v_proj.weight": "blk.0.attn_v.weight", "midlayer.self_attn.o_proj.weight": "blk.0.attn_output.weight",
          "midlayer.post_attention_layernorm.weight": "blk.0.ffn_norm.weight", "midlayer.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
          "midlayer.mlp.up_proj.weight": "blk.0.ffn_up.weight", "midlayer.mlp.down_proj.weight": "blk.0.ffn_down.weight",
          "fc.weight": "fc.weight", "norm.weight": "output_norm.weight", "lm_head.weight": "output.weight"}


@pytest.mark.parametrize("layout,fc_norm,norm_output", [
    ("homespec", False, False), ("homespec", True, True), ("eagle3", False, False), ("eagle3-model", False, False),
    ("speculators", False, False), ("speculators", True, True), ("speculators", False, True)])
def test_every_layout_round_trips(tmp_path, tiny_target, layout, fc_norm, norm_output):
    from homespec.nets.load import unpermute_qk

    d, w = make_head_dir(tmp_path / layout, layout, fc_norm=fc_norm, norm_output=norm_output, window=512, seed=3)
    conv = head_gguf(d, tiny_target, dtype="f16", patched=True, cache_dir=tmp_path / "cache")
    assert conv.kind == ("eagle3.1" if fc_norm or norm_output else "eagle3") and not conv.cached and conv.note is None
    meta, got, types = read_gguf(conv.path)
    assert meta["general.architecture"] == "eagle3" and meta["eagle3.target_layers"] == [2, N_LAYER // 2, N_LAYER - 3]
    assert meta["eagle3.target_hidden_size"] == H and meta["eagle3.vocab_size"] == V
    assert meta["tokenizer.ggml.tokens"].length == V
    assert ("eagle3.fc_norm" in meta) == fc_norm and ("eagle3.norm_output" in meta) == norm_output
    for src, dst in _NAMES.items():  # f16 matrices, F32 norms
        assert np.allclose(got[dst], w[src], rtol=1e-3, atol=1e-3), dst
    assert types["fc.weight"] == "F16" and types["output_norm.weight"] == "F32"
    assert np.allclose(unpermute_qk(got["blk.0.attn_q.weight"], 4), w["midlayer.self_attn.q_proj.weight"], atol=1e-3)
    assert np.allclose(unpermute_qk(got["blk.0.attn_k.weight"], 2), w["midlayer.self_attn.k_proj.weight"], atol=1e-3)
    assert np.array_equal(got["d2t"], np.arange(DV) + w["d2t"])  # absolute target ids
    if fc_norm:  # [3, H_t] in numpy order: ggml [H_t, 3], one row per feature
        assert np.array_equal(got["fc_norm.weight"], np.stack([w[f"fc_norm.{i}.weight"] for i in range(3)]))
    assert "t2d" not in got and "token_embd.weight" not in got
    # the window: homespec's own key, where the head has one
    assert (meta.get("homespec.draft_window"), conv.window) == ((512, 512) if layout == "homespec" else (None, None))


def test_the_original_release_reads_the_same_from_pytorch_model_bin_and_safetensors(tmp_path, tiny_target):
    a, _ = make_head_dir(tmp_path / "bin", "eagle3", seed=4)
    b, _ = make_head_dir(tmp_path / "st", "speculators", seed=4)
    ga = read_gguf(head_gguf(a, tiny_target, patched=True, cache_dir=tmp_path / "c").path)[1]
    gb = read_gguf(head_gguf(b, tiny_target, patched=True, cache_dir=tmp_path / "c").path)[1]
    assert ga.keys() == gb.keys() and all(np.array_equal(ga[k], gb[k]) for k in ga)


def test_a_second_call_hits_the_cache_and_a_changed_head_converts_again(tmp_path, tiny_target):
    d, _ = make_head_dir(tmp_path / "h", "homespec", fc_norm=True, norm_output=True, seed=5)
    first = head_gguf(d, tiny_target, dtype="f16", patched=True, cache_dir=tmp_path / "c")
    stamp = first.path.stat().st_mtime_ns
    again = head_gguf(d, tiny_target, dtype="f16", patched=True, cache_dir=tmp_path / "c")
    assert again.cached and again.path == first.path and again.path.stat().st_mtime_ns == stamp
    q8 = head_gguf(d, tiny_target, dtype="q8_0", patched=True, cache_dir=tmp_path / "c")
    assert not q8.cached and q8.path != first.path
    make_head_dir(d, "homespec", fc_norm=True, norm_output=True, seed=6)  # new weights, same place
    changed = head_gguf(d, tiny_target, dtype="f16", patched=True, cache_dir=tmp_path / "c")
    assert not changed.cached and changed.path != first.path


def test_q8_0_quantizes_the_matrices_and_keeps_1d_tensors_f32(tmp_path, tiny_target):
    d, w = make_head_dir(tmp_path / "h", "speculators", fc_norm=True, norm_output=True, seed=7)
    conv = head_gguf(d, tiny_target, dtype="q8_0", patched=True, cache_dir=tmp_path / "c")
    meta, got, types = read_gguf(conv.path)
    assert meta["general.file_type"] == 7  # LLAMA_FTYPE_MOSTLY_Q8_0
    assert {types[n] for n in ("fc.weight", "output.weight", "blk.0.attn_q.weight", "blk.0.ffn_down.weight")} == {"Q8_0"}
    assert {types[n] for n in ("fc_norm.weight", "output_norm.weight", "blk.0.attn_norm.weight")} == {"F32"}
    assert types["d2t"] == "I64"
    assert np.allclose(got["fc.weight"], w["fc.weight"], atol=0.02)  # q8_0: 8 bits per weight, one scale per 32


def test_a_head_wider_than_its_target_brings_its_embeddings(tmp_path, tiny_target):
    d, w = make_head_dir(tmp_path / "wide", "homespec", h=96, head_dim=24, embed=True, seed=8)
    got = read_gguf(head_gguf(d, tiny_target, dtype="f16", patched=True, cache_dir=tmp_path / "c").path)[1]
    assert np.allclose(got["token_embd.weight"], w["embed_tokens.weight"], atol=1e-2)
    d2, _ = make_head_dir(tmp_path / "wide2", "homespec", h=96, head_dim=24, seed=8)
    with pytest.raises(HomespecError, match="96 wide but the target.s embeddings are 64"):
        head_gguf(d2, tiny_target, patched=True, cache_dir=tmp_path / "c")


def test_a_head_for_another_target_is_refused(tmp_path, tiny_target):
    d, _ = make_head_dir(tmp_path / "h", "homespec", ht=96, seed=9)
    with pytest.raises(HomespecError, match="96-wide target features"):
        head_gguf(d, tiny_target, patched=True, cache_dir=tmp_path / "c")
    with pytest.raises(UsageError, match="draft-dtype"):
        head_gguf(d, tiny_target, dtype="q4_0", patched=True, cache_dir=tmp_path / "c")


def test_an_eagle3_gguf_given_directly_is_checked_and_used_as_it_is(tmp_path, tiny_target):
    from tiny_models import make_tiny_gguf

    d, _ = make_head_dir(tmp_path / "h", "homespec", fc_norm=True, norm_output=True, window=256, seed=10)
    made = head_gguf(d, tiny_target, patched=True, cache_dir=tmp_path / "c")
    given = head_gguf(made.path, tiny_target, patched=True, cache_dir=tmp_path / "c")
    assert (given.path, given.kind, given.window, given.sinks) == (made.path, "gguf", 256, 4)
    other = make_tiny_gguf(tmp_path / "other.gguf", n_layer=6, n_embd=32)
    with pytest.raises(HomespecError, match="64-wide target features"):
        head_gguf(made.path, other, patched=True, cache_dir=tmp_path / "c")
    with pytest.raises(UsageError, match="not an eagle3 head"):
        head_gguf(tiny_target, tiny_target, patched=True, cache_dir=tmp_path / "c")
    with pytest.raises(HomespecError, match="lacks homespec's EAGLE-3.1 patch"):
        head_gguf(made.path, tiny_target, patched=False, cache_dir=tmp_path / "c")


def test_without_the_patch_a_31_head_becomes_its_eagle3_twin(tmp_path, tiny_target):
    """A llama.cpp without the patch: the twin (fc_norm folded into norm_before_fc with scales fitted on
    the target's own features from llama.cpp, norm_output off), and a note saying so."""
    from homespec.backends.llamacpp.head_twin import calibration_features, fc_norm_scales

    d, w = make_head_dir(tmp_path / "h", "speculators", fc_norm=True, norm_output=True, seed=11)
    conv = head_gguf(d, tiny_target, patched=False, cache_dir=tmp_path / "c")
    assert conv.kind == "eagle3-twin" and "EAGLE-3 twin" in conv.note and "\n" not in conv.note
    meta, got, _ = read_gguf(conv.path)
    assert meta["eagle3.norm_before_fc"] is True and "eagle3.fc_norm" not in meta and "eagle3.norm_output" not in meta
    assert "fc_norm.weight" not in got
    scales = fc_norm_scales(calibration_features(tiny_target, (2, N_LAYER // 2, N_LAYER - 3)), 1e-5)
    folded = np.concatenate([w[f"fc_norm.{i}.weight"] * np.float32(scales[i]) for i in range(3)])
    assert np.allclose(got["enc.output_norm.weight"], folded, rtol=1e-5)
    again = head_gguf(d, tiny_target, patched=False, cache_dir=tmp_path / "c")
    assert again.cached and again.note == conv.note


def test_the_conversion_never_imports_torch(tmp_path, tiny_target):
    """torch and a CUDA llama.cpp crash in one process: the conversion path must run where torch cannot load."""
    d, _ = make_head_dir(tmp_path / "h", "speculators", fc_norm=True, norm_output=True, seed=12)
    code = f"""
import sys
sys.modules["torch"] = None  # `import torch` now fails
from homespec.backends.llamacpp.head_convert import head_gguf
from homespec.backends.llamacpp.exports import eagle3_features
native = head_gguf({str(d)!r}, {str(tiny_target)!r}, dtype="q8_0", cache_dir={str(tmp_path / "c")!r})
twin = head_gguf({str(d)!r}, {str(tiny_target)!r}, patched=False, cache_dir={str(tmp_path / "c")!r})
given = head_gguf(native.path, {str(tiny_target)!r}, cache_dir={str(tmp_path / "c")!r})
print(native.kind, twin.kind, given.kind, eagle3_features())
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    *kinds, features = p.stdout.split()
    assert kinds == ["eagle3.1", "eagle3-twin", "gguf"]
    assert int(features) == PATCH_FEATURES  # the patch this build carries


def test_the_head_files_are_read_without_torch_in_published_names(tmp_path):
    from homespec.nets.eagle3_files import read_head

    d, w = make_head_dir(tmp_path / "h", "eagle3-model", seed=13)
    h = read_head(d)
    assert h.layout == "eagle3-model" and h.config.draft_vocab_size == DV
    assert all(np.array_equal(h.tensors[k], v) for k, v in w.items())
    cfg = json.loads((d / "config.json").read_text())
    cfg["intermediate_size"] = 256
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HomespecError, match="the config implies"):
        read_head(d)


def test_the_targets_tokenizer_is_copied_key_for_key_with_its_types(tmp_path, smollm2_path):
    """The draft GGUF carries the target's tokenizer (llama.cpp checks a draft's vocabulary against its target's)."""
    from homespec.backends.llamacpp.head_gguf import TOKENIZER_ARRAYS
    from homespec.formats.gguf import read_gguf_header

    d, _ = make_head_dir(tmp_path / "h", "homespec", h=576, ht=576, n_head=9, n_kv=3, head_dim=64, seed=14)
    conv = head_gguf(d, smollm2_path, patched=True, cache_dir=tmp_path / "c")
    a = read_gguf_header(smollm2_path, keep_arrays=TOKENIZER_ARRAYS)
    b = read_gguf_header(conv.path, keep_arrays=TOKENIZER_ARRAYS)
    keys = sorted(k for k in a.metadata if k.startswith("tokenizer."))
    assert keys == sorted(k for k in b.metadata if k.startswith("tokenizer.")) and "tokenizer.ggml.merges" in keys
    for k in keys:
        assert a.metadata[k] == b.metadata[k] and a.value_types[k] == b.value_types[k], k

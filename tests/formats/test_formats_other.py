"""config.json, safetensors headers, EXL2 directories and EAGLE-3 checkpoints."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from homespec.errors import FormatError, UsageError
from homespec.formats.eagle import draft_spec_from_checkpoint, feature_layers
from homespec.formats.exl2 import model_spec_from_exl2_dir
from homespec.formats.hf import model_spec_from_hf_config, read_safetensors_header

LLAMA = {  # a small Llama-shaped config (SmolLM2-135M's numbers)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576, "intermediate_size": 1536,
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
    "max_position_embeddings": 8192, "rope_theta": 100000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
}


def write_config(folder: Path, cfg: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def tiny_llama_weights(cfg: dict, dtype=np.float16) -> dict[str, np.ndarray]:
    d, ff, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = d // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    out = {"model.embed_tokens.weight": np.zeros((v, d), dtype), "model.norm.weight": np.zeros((d,), dtype)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {p + "self_attn.q_proj.weight": np.zeros((d, d), dtype), p + "self_attn.k_proj.weight": np.zeros((kv, d), dtype),
                p + "self_attn.v_proj.weight": np.zeros((kv, d), dtype), p + "self_attn.o_proj.weight": np.zeros((d, d), dtype),
                p + "mlp.gate_proj.weight": np.zeros((ff, d), dtype), p + "mlp.up_proj.weight": np.zeros((ff, d), dtype),
                p + "mlp.down_proj.weight": np.zeros((d, ff), dtype), p + "input_layernorm.weight": np.zeros((d,), dtype),
                p + "post_attention_layernorm.weight": np.zeros((d,), dtype)}
    return out


def test_hf_config_predicts_bf16_and_quant(tmp_path):
    folder = write_config(tmp_path / "SmolLM2-135M", LLAMA)
    spec = model_spec_from_hf_config(folder)
    assert (spec.arch, spec.n_layer, spec.n_embd, spec.n_head_kv, spec.head_dim, spec.n_vocab) == \
        ("llama", 30, 576, 3, 64, 49152)
    assert spec.format == "hf" and spec.quant == "BF16" and spec.tied_embeddings
    assert spec.n_params == 134_515_008  # the same count as the real GGUF's tensors
    norms = 30 * 2 * 576 + 576  # 1-D norms stay F32 (4 bytes), every matrix is BF16 (2 bytes)
    assert sum(t.n_bytes for t in spec.tensors) == 2 * spec.n_params + 2 * norms
    q = model_spec_from_hf_config(folder / "config.json", "Q4_K_M")
    assert q.quant == "Q4_K_M" and sum(t.n_bytes for t in q.tensors) < sum(t.n_bytes for t in spec.tensors) / 2
    exl2 = model_spec_from_hf_config(folder, "4.0bpw")
    assert exl2.quant == "EXL2-4" and any(t.ggml_type == "EXL2" for t in exl2.tensors)


def test_hf_safetensors_give_exact_sizes(tmp_path):
    cfg = {**LLAMA, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 100}
    folder = write_config(tmp_path / "tiny", cfg)
    weights = tiny_llama_weights(cfg)
    half = len(weights) // 2
    names = sorted(weights)
    save_file({k: weights[k] for k in names[:half]}, str(folder / "model-00001-of-00002.safetensors"))
    save_file({k: weights[k] for k in names[half:]}, str(folder / "model-00002-of-00002.safetensors"))
    spec = model_spec_from_hf_config(folder)
    assert spec.quant == "F16" and len(spec.tensors) == len(weights)
    assert sum(t.n_bytes for t in spec.tensors) == sum(w.nbytes for w in weights.values())
    by_name = {t.name: t for t in spec.tensors}
    assert by_name["blk.1.attn_k.weight"].shape == (64, 32) and by_name["blk.1.attn_k.weight"].layer == 1
    assert by_name["token_embd.weight"].shape == (64, 100)


def test_gemma3_text_config_is_nested(tmp_path):
    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
           "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "num_hidden_layers": 34,
                           "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                           "vocab_size": 262208, "max_position_embeddings": 131072, "sliding_window": 1024,
                           "model_type": "gemma3_text"}}
    spec = model_spec_from_hf_config(write_config(tmp_path / "gemma-3-4b", cfg), "Q4_K_M")
    assert (spec.arch, spec.n_layer, spec.head_dim, spec.sliding_window) == ("gemma3", 34, 256, 1024)
    assert spec.tied_embeddings and len(spec.swa_layers) == 34 - 34 // 6 and 5 not in spec.swa_layers


def test_bad_configs(tmp_path):
    with pytest.raises(UsageError, match="no config.json"):
        model_spec_from_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON"):
        model_spec_from_hf_config(tmp_path)
    write_config(tmp_path, {"architectures": ["LlamaForCausalLM"], "hidden_size": 8})
    with pytest.raises(FormatError, match="lacks"):
        model_spec_from_hf_config(tmp_path)


def test_hostile_safetensors_headers(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 10 * 2**30) + b"{}")
    with pytest.raises(FormatError, match="header claims"):
        read_safetensors_header(bad)
    header = json.dumps({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 800]}}).encode()
    bad.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    with pytest.raises(FormatError, match="outside the file"):
        read_safetensors_header(bad)
    bad.write_bytes(b"\1\2")
    with pytest.raises(FormatError, match="truncated"):
        read_safetensors_header(bad)


# --- EXL2 -----------------------------------------------------------------------------------


def _exl2_linear(prefix: str, n_in: int, n_out: int, bits: int) -> dict[str, np.ndarray]:
    """The parts exllamav2 stores for one quantised linear layer (contents irrelevant, sizes real)."""
    groups = n_in // 32
    return {prefix + ".q_weight": np.zeros((n_in * bits // 32, n_out), np.int32),
            prefix + ".q_scale": np.zeros((groups, n_out // 8), np.int32),
            prefix + ".q_scale_max": np.zeros((groups,), np.float16),
            prefix + ".q_groups": np.zeros((2 * 1,), np.int16),
            prefix + ".q_invperm": np.zeros((n_in,), np.int16)}


def test_exl2_dir_recomputes_bpw(tmp_path):
    cfg = {**LLAMA, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2, "vocab_size": 1000, "tie_word_embeddings": False,
           "quantization_config": {"quant_method": "exl2", "bits": 4.0, "head_bits": 6}}
    folder = write_config(tmp_path / "tiny-exl2", cfg)
    tensors = {"model.embed_tokens.weight": np.zeros((1000, 256), np.float16),
               "model.norm.weight": np.zeros((256,), np.float16)}
    tensors |= _exl2_linear("lm_head", 256, 1000 // 8 * 8, 6)
    body_bytes = body_weights = 0
    for i in range(2):
        for name, n_in, n_out in (("self_attn.q_proj", 256, 256), ("self_attn.k_proj", 256, 128),
                                  ("self_attn.v_proj", 256, 128), ("self_attn.o_proj", 256, 256),
                                  ("mlp.gate_proj", 256, 512), ("mlp.up_proj", 256, 512), ("mlp.down_proj", 512, 256)):
            parts = _exl2_linear(f"model.layers.{i}.{name}", n_in, n_out, 4)
            tensors |= parts
            body_bytes += sum(p.nbytes for p in parts.values())
            body_weights += n_in * n_out
        tensors[f"model.layers.{i}.input_layernorm.weight"] = np.zeros((256,), np.float16)
    save_file(tensors, str(folder / "output.safetensors"))
    spec = model_spec_from_exl2_dir(folder)
    bpw = 8 * body_bytes / body_weights
    assert 4.0 < bpw < 5.0 and spec.quant == f"EXL2-{bpw:.2f}" and spec.format == "exl2"
    by_name = {t.name: t for t in spec.tensors}
    assert by_name["blk.0.attn_q.weight"].ggml_type == "EXL2" and by_name["blk.0.attn_q.weight"].shape == (256, 256)
    assert by_name["output.weight"].ggml_type == "EXL2" and not spec.tied_embeddings
    assert sum(t.n_bytes for t in spec.tensors) == sum(a.nbytes for a in tensors.values())
    with pytest.raises(UsageError, match="not an EXL2 model"):
        model_spec_from_exl2_dir(write_config(tmp_path / "plain", LLAMA))


# --- EAGLE-3 heads ----------------------------------------------------------------------------


def eagle_head(folder: Path, *, hidden=64, target_hidden=96, heads=4, kv_heads=2, ff=128, draft_vocab=50,
               target_vocab=200, fc_norm=False, extra_cfg=None) -> Path:
    """A tiny EAGLE-3 checkpoint in the published key layout (shapes as in facts: fc [H, 3H_t])."""
    hd = hidden // heads
    cfg = {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": hidden, "num_attention_heads": heads,
           "num_key_value_heads": kv_heads, "intermediate_size": ff, "num_hidden_layers": 1,
           "vocab_size": target_vocab, "draft_vocab_size": draft_vocab, "torch_dtype": "bfloat16",
           **(extra_cfg or {})}
    write_config(folder, cfg)
    f = np.float16
    w = {"fc.weight": np.zeros((hidden, 3 * target_hidden), f),
         "midlayer.self_attn.q_proj.weight": np.zeros((heads * hd, 2 * hidden), f),
         "midlayer.self_attn.k_proj.weight": np.zeros((kv_heads * hd, 2 * hidden), f),
         "midlayer.self_attn.v_proj.weight": np.zeros((kv_heads * hd, 2 * hidden), f),
         "midlayer.self_attn.o_proj.weight": np.zeros((hidden, heads * hd), f),
         "midlayer.mlp.gate_proj.weight": np.zeros((ff, hidden), f), "midlayer.mlp.up_proj.weight": np.zeros((ff, hidden), f),
         "midlayer.mlp.down_proj.weight": np.zeros((hidden, ff), f),
         "midlayer.hidden_norm.weight": np.zeros((hidden,), f), "midlayer.input_layernorm.weight": np.zeros((hidden,), f),
         "midlayer.post_attention_layernorm.weight": np.zeros((hidden,), f), "norm.weight": np.zeros((hidden,), f),
         "lm_head.weight": np.zeros((draft_vocab, hidden), f), "d2t": np.zeros((draft_vocab,), np.int64),
         "t2d": np.zeros((target_vocab,), np.bool_), "embed_tokens.weight": np.zeros((target_vocab, hidden), f)}
    if fc_norm:
        w |= {f"fc_norm.{i}.weight": np.zeros((target_hidden,), f) for i in range(3)}
    save_file(w, str(folder / "model.safetensors"))
    return folder


def test_eagle_checkpoint(tmp_path):
    folder = eagle_head(tmp_path / "EAGLE3-tiny", extra_cfg={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 4, 7]}})
    d = draft_spec_from_checkpoint(folder)
    assert (d.kind, d.n_layer, d.n_embd, d.n_head, d.n_head_kv, d.head_dim) == ("eagle3", 1, 64, 4, 2, 16)
    assert (d.draft_vocab, d.target_vocab, d.target_hidden, d.dtype) == (50, 200, 96, "f16")
    # the target's embeddings are not the head's: left out of its weight bytes
    assert d.weight_bytes == sum(t.n_bytes for t in d.tensors) and "embed_tokens.weight" not in {t.name for t in d.tensors}
    assert d.weight_bytes == 2 * (64 * 288 + 3 * 0 + 64 * 128 + 2 * 32 * 128 + 64 * 64 + 3 * 128 * 64 + 4 * 64
                                  + 50 * 64) + 8 * 50 + 200
    assert feature_layers(folder) == (1, 4, 7)


def test_eagle31_and_torch_bin(tmp_path):
    d = draft_spec_from_checkpoint(eagle_head(tmp_path / "h31", fc_norm=True) / "config.json")
    assert d.kind == "eagle3.1" and d.fc_norm and not d.norm_output
    torch = pytest.importorskip("torch")
    folder = write_config(tmp_path / "bin", {**json.loads((tmp_path / "h31" / "config.json").read_text()),
                                             "norm_output": True})
    torch.save({"fc.weight": torch.zeros(64, 288, dtype=torch.bfloat16), "d2t": torch.zeros(50, dtype=torch.int64)},
               folder / "pytorch_model.bin")
    d = draft_spec_from_checkpoint(folder)
    assert d.kind == "eagle3.1" and d.norm_output and d.weight_bytes == 64 * 288 * 2 + 50 * 8


def test_not_an_eagle_head(tmp_path):
    with pytest.raises(UsageError, match="not an EAGLE-3 head"):
        draft_spec_from_checkpoint(write_config(tmp_path / "m", LLAMA))
    folder = write_config(tmp_path / "noweights", {**LLAMA, "num_hidden_layers": 1, "draft_vocab_size": 10})
    with pytest.raises(UsageError, match="no model.safetensors"):
        draft_spec_from_checkpoint(folder)


# --- one safetensors reader ---------------------------------------------------------------------

EXL2_CFG = {**LLAMA, "quantization_config": {"quant_method": "exl2", "bits": 4.0}}
DAMAGE = [(b"this is not a safetensors file at all" * 10, "header claims"), (b"\1\2", "truncated safetensors file"),
          (None, "holds no tensors")]


@pytest.mark.parametrize("content,message", DAMAGE, ids=["junk", "truncated", "no-tensors"])
def test_one_reader_one_message_for_a_damaged_or_empty_safetensors_file(tmp_path, content, message):
    """The planner (HF, EXL2 and EAGLE-head sizes), the torch backend's weights and the head loader
    read a damaged file, or a valid one holding no tensor, through one reader: one FormatError."""
    pytest.importorskip("torch")
    from homespec.nets.eagle3 import load_head
    from homespec.nets.load import read_hf_tensors

    hf, exl2 = write_config(tmp_path / "hf", LLAMA), write_config(tmp_path / "exl2", EXL2_CFG)
    head = eagle_head(tmp_path / "head")
    for folder in (hf, exl2, head):
        f = folder / "model.safetensors"
        if content is None:
            save_file({}, str(f), metadata={"format": "pt"})  # valid, zero tensors
        else:
            f.write_bytes(content)
    readers = [lambda: model_spec_from_hf_config(hf), lambda: model_spec_from_exl2_dir(exl2),
               lambda: draft_spec_from_checkpoint(head), lambda: read_hf_tensors(str(hf)),
               lambda: load_head(head, target_n_layer=8, target_hidden=96, target_vocab=200)]
    said = set()
    for read in readers:
        with pytest.raises(FormatError) as e:
            read()
        path, _, what = e.value.message.partition(": ")
        assert path.endswith("model.safetensors") and message in what and e.value.hint, e.value.message
        said.add((what, e.value.hint))
    assert len(said) == 1, said


def test_a_folder_without_safetensors_files_says_so(tmp_path):
    pytest.importorskip("torch")
    from homespec.nets.load import read_hf_tensors

    for read, folder in ((model_spec_from_exl2_dir, write_config(tmp_path / "exl2", EXL2_CFG)),
                         (read_hf_tensors, write_config(tmp_path / "hf", LLAMA))):
        with pytest.raises(FormatError, match=r"no \*\.safetensors files"):
            read(str(folder))


def test_header_entries_must_match_their_byte_ranges(tmp_path):
    """What the safetensors library refuses when loading, the header reader refuses too, so the
    planner and the loaders agree on which files are readable."""
    bad = tmp_path / "bad.safetensors"
    header = json.dumps({"w": {"dtype": "F16", "shape": [4], "data_offsets": [0, 6]}}).encode()
    bad.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 6)
    with pytest.raises(FormatError, match="holds 6 bytes, not the 8"):
        read_safetensors_header(bad)
    with pytest.raises(FormatError, match="cannot read it"):
        read_safetensors_header(tmp_path / "absent.safetensors")

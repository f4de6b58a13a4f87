"""EXL2 backend on the CPU: settings from a plan, directory checks, the exllamav2 import error,
and the pure pieces that drive exllamav2 (feature modules, masks, tree positions, commits).
The GPU run (conversion, greedy EAGLE-3 == plain greedy) is tests/gpu/test_exl2_gpu.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import save_file

from homespec.backends.exl2.load import import_exllamav2
from homespec.backends.settings import Exl2Settings, check_exl2_dir, exl2_settings
from homespec.backends.exl2.tree import (MASKED, RopePatch, additive_mask, commit_plan,
                                         feature_module_indices)
from homespec.contracts.tree import depth_list
from homespec.errors import FormatError, HomespecError, UsageError
from homespec.plan.settings import Settings
from homespec.plan.lines import LineKind

N_LAYER, HIDDEN = 4, 64


def _linear(prefix: str, n_in: int, n_out: int, bits: int) -> dict[str, np.ndarray]:
    """The parts exllamav2 stores for one quantised linear layer (exllamav2/linear.py names)."""
    rng = np.random.default_rng(len(prefix))
    return {prefix + ".q_weight": rng.integers(0, 2**31 - 1, (n_in * bits // 32, n_out), dtype=np.int32),
            prefix + ".q_scale": rng.integers(0, 2**31 - 1, (n_in // 32, n_out // 8), dtype=np.int32),
            prefix + ".q_scale_max": np.ones((n_in // 32,), np.float16),
            prefix + ".q_groups": np.array([bits, 0], np.int16),
            prefix + ".q_invperm": rng.permutation(n_in).astype(np.int16)}


@pytest.fixture
def exl2_dir(tmp_path) -> Path:
    """A small EXL2-layout Llama directory (config.json + safetensors as exllamav2 writes them)."""
    folder = tmp_path / "tiny-exl2"
    folder.mkdir()
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
           "intermediate_size": 128, "num_hidden_layers": N_LAYER, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 512, "max_position_embeddings": 2048, "rope_theta": 10000.0, "rms_norm_eps": 1e-5,
           "tie_word_embeddings": False, "torch_dtype": "float16",
           "quantization_config": {"quant_method": "exl2", "bits": 4.0, "head_bits": 6}}
    (folder / "config.json").write_text(json.dumps(cfg))
    tensors = {"model.embed_tokens.weight": np.zeros((512, HIDDEN), np.float16),
               "model.norm.weight": np.ones((HIDDEN,), np.float16)}
    tensors |= _linear("lm_head", HIDDEN, 512, 6)
    for i in range(N_LAYER):
        for name, n_in, n_out in (("self_attn.q_proj", 64, 64), ("self_attn.k_proj", 64, 32), ("self_attn.v_proj", 64, 32),
                                  ("self_attn.o_proj", 64, 64), ("mlp.gate_proj", 64, 128), ("mlp.up_proj", 64, 128),
                                  ("mlp.down_proj", 128, 64)):
            tensors |= _linear(f"model.layers.{i}.{name}", n_in, n_out, 4)
        tensors[f"model.layers.{i}.input_layernorm.weight"] = np.ones((HIDDEN,), np.float16)
        tensors[f"model.layers.{i}.post_attention_layernorm.weight"] = np.ones((HIDDEN,), np.float16)
    save_file(tensors, str(folder / "output.safetensors"))
    return folder


# --- settings and directory checks ---------------------------------------------------------------


@pytest.mark.parametrize("kv,mode", [("f16", "fp16"), ("q8", "q8"), ("q8_0", "q8"), ("q6", "q6"), ("q4", "q4")])
def test_settings_follow_the_plan(exl2_dir, kv, mode):
    plan_settings = Settings(backend="exl2", n_ctx=4096, type_k=kv, type_v=kv)
    s = exl2_settings(exl2_dir, plan_settings)
    assert s == Exl2Settings(model_dir=str(exl2_dir), max_seq_len=4096, cache_mode=mode, max_input_len=2048,
                             n_layer=N_LAYER, hidden_size=HIDDEN, quant=s.quant)
    assert s.quant.startswith("EXL2-4.")


def test_explicit_values_win_and_small_contexts_shrink_the_chunk(exl2_dir):
    s = exl2_settings(exl2_dir, Settings(backend="exl2", n_ctx=4096), max_context=512, kv_type="q4")
    assert (s.max_seq_len, s.cache_mode, s.max_input_len) == (512, "q4", 512)


def test_wrong_plans_and_settings_are_usage_errors(exl2_dir):
    with pytest.raises(UsageError, match="llamacpp backend"):
        exl2_settings(exl2_dir, Settings(backend="llamacpp", n_ctx=4096))
    with pytest.raises(UsageError, match="no 'q5_0' cache"):
        exl2_settings(exl2_dir, max_context=1024, kv_type="q5_0")
    with pytest.raises(UsageError, match="no context size"):
        exl2_settings(exl2_dir)


def test_directory_checks(exl2_dir, tmp_path):
    assert check_exl2_dir(exl2_dir).n_layer == N_LAYER
    with pytest.raises(UsageError, match="no EXL2 model directory"):
        check_exl2_dir(tmp_path / "missing")
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(UsageError, match="is a file"):
        check_exl2_dir(gguf)
    plain = tmp_path / "plain"
    plain.mkdir()
    cfg = json.loads((exl2_dir / "config.json").read_text())
    del cfg["quantization_config"]
    (plain / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UsageError, match="not an EXL2 model"):
        check_exl2_dir(plain)
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text((exl2_dir / "config.json").read_text())
    with pytest.raises(FormatError, match="no \\*.safetensors"):
        check_exl2_dir(empty)


# --- the import error path (a real import attempt in this environment) --------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine-without-CUDA path")
def test_without_cuda_loading_is_a_clear_error(exl2_dir):
    with pytest.raises(HomespecError) as err:
        import_exllamav2()
    assert "exllamav2" in err.value.message and "homespec[exl2]" in err.value.hint
    from homespec.backends.exl2.backend import Exl2Backend

    with pytest.raises(HomespecError, match="exllamav2"):
        Exl2Backend.load(str(exl2_dir), max_context=256)


# --- the pieces that drive exllamav2 -----------------------------------------------------------


def _modules(n_layer: int) -> list[tuple[str, int | None]]:
    """model.modules as exllamav2 builds a Llama: embedding, (attention, mlp) per layer, norm, head."""
    out: list[tuple[str, int | None]] = [("ExLlamaV2Embedding", None)]
    for i in range(n_layer):
        out += [("attn", i), ("ExLlamaV2MLP", i)]
    return out + [("norm", None), ("ExLlamaV2Linear", None)]


def test_feature_layers_map_to_attention_inputs_and_the_final_norm():
    kinds = _modules(30)
    # EAGLE-3's default layers 2, 15, 27 of SmolLM2; layer 30 = the last layer's output
    assert feature_module_indices(kinds, [2, 15, 27], 30) == [5, 31, 55]
    assert feature_module_indices(kinds, [30, 0], 30) == [61, 1]
    with pytest.raises(HomespecError, match="feature layer 31"):
        feature_module_indices(kinds, [31], 30)


def test_additive_mask_blocks_exactly_the_disallowed_pairs():
    allowed = torch.tensor([[True, True, False], [True, False, True]])
    m = additive_mask(allowed)
    assert m.shape == (1, 1, 2, 3) and m.dtype == torch.float16
    assert torch.equal(m[0, 0] == 0, allowed) and float(m.min()) == MASKED
    # softmax over a masked row puts no weight on blocked keys (fp16 -65504 underflows exp)
    w = torch.softmax(torch.zeros(2, 3) + m[0, 0].float(), -1)
    assert float(w[~allowed].max()) == 0.0


def test_rope_patch_moves_tree_rows_and_restores_them():
    original = torch.arange(20 * 4, dtype=torch.float16).view(1, 1, 20, 4)
    table = original.clone()
    parents = [-1, 0, 0, 1, 2]
    patch = RopePatch(10, tuple(10 + d for d in depth_list(parents)))
    patch.apply(table, original)
    assert torch.equal(table[0, 0, 10:15], original[0, 0, [10, 11, 11, 12, 12]])
    assert torch.equal(table[0, 0, :10], original[0, 0, :10])
    patch.restore(table, original)
    assert torch.equal(table, original)


def test_commit_plan():
    assert commit_plan([0, 1, 2], q_block=0) == "advance"
    assert commit_plan([0, 2, 5], q_block=0) == "copy"
    assert commit_plan([0, 2, 5], q_block=1) == "copy"
    assert commit_plan([0, 2, 5], q_block=8) == "recompute"  # SmolLM2: 3 KV heads x 64 needs 8-token blocks


# --- a run is built from its plan (docs/architecture.md, contract 4) ----------------------------


def test_a_run_gets_the_settings_of_its_plan(exl2_dir):
    """exllamav2 cannot load here, so this checks what the run would hand Exl2Backend.from_settings:
    the plan's context, cache type, input length (the chunk its scratch is sized for) and reserves."""
    from homespec.backends.registry import settings_for
    from homespec.engine.setup import plan_for_run
    from homespec.plan.settings import EXL2_CACHE
    from homespec.session import RunOptions

    opt = RunOptions(model=str(exl2_dir), method="none", backend="exl2", ctx=1024)
    plan = plan_for_run(opt, str(exl2_dir), gpu="4090,3090")
    assert plan.settings.backend == "exl2" and plan.settings.n_ctx == 1024
    s = settings_for(plan, model_dir=str(exl2_dir))
    assert s == exl2_settings(exl2_dir, plan)
    assert (s.max_seq_len, s.cache_mode) == (plan.settings.n_ctx, EXL2_CACHE[plan.settings.type_k])
    assert {i.detail for i in plan.items if i.kind == LineKind.COMPUTE} == {f"scratch for {s.max_input_len} tokens"}
    reserves = {i.device: i.bytes for i in plan.items if i.kind == LineKind.RESERVE}
    assert len(s.reserve_vram) == 2 and all(s.reserve_vram[d] == b for d, b in reserves.items())


def test_a_catalogue_plan_names_no_directory(exl2_dir):
    from homespec.backends.registry import settings_for
    from homespec.plan.api import PlanRequest, make_plan

    with pytest.raises(UsageError, match="names no EXL2 directory"):
        settings_for(make_plan(PlanRequest(model="mistral-7b-exl2-4.65", gpu="4090", ram=64)))

"""MTP drafts: a model's own next-token-prediction layers, budgeted and emitted.

DeepSeek-V3's config.json shape, scaled down (MLA, shared expert, one leading dense layer, one MTP
layer); and a GGUF header whose block_count includes the MTP block.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from homespec.cli import main
from homespec.formats.gguf import read_gguf_header
from homespec.formats.gguf_model import model_spec_from_gguf
from homespec.plan.api import PlanRequest, make_plan
from homespec.quant.weights import group_weights
from homespec.plan.lines import LineKind

SMALL_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 512,
    "intermediate_size": 1024, "moe_intermediate_size": 128, "num_hidden_layers": 6, "num_attention_heads": 8,
    "num_key_value_heads": 8, "n_routed_experts": 16, "num_experts_per_tok": 4, "n_shared_experts": 1,
    "first_k_dense_replace": 1, "kv_lora_rank": 128, "q_lora_rank": 192, "qk_rope_head_dim": 32,
    "qk_nope_head_dim": 64, "v_head_dim": 64, "num_nextn_predict_layers": 1, "vocab_size": 32000,
    "max_position_embeddings": 16384, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def v3_config(tmp_path_factory):
    d = tmp_path_factory.mktemp("small-v3")
    (d / "config.json").write_text(json.dumps(SMALL_V3))
    return str(d / "config.json")


def _on(plan, name):
    return sum(i.bytes for i in plan.items if i.kind == name)


def test_mla_cache_is_the_latent_only(v3_config):
    p = make_plan(PlanRequest(model=v3_config, quant="Q8_0", gpu="none", ram=64, ctx=4096, draft="none"))
    assert p.model.is_mla and p.model.n_head_kv == 1
    # 6 layers x 4096 cells x (kv_lora_rank 128 + rope 32) f16, no V
    assert _on(p, LineKind.TARGET_KV) == 6 * 4096 * (128 + 32) * 2


def test_mtp_is_the_default_draft_and_is_budgeted(v3_config):
    p = make_plan(PlanRequest(model=v3_config, quant="Q8_0", gpu="4090", ram=64, ctx=4096))
    d = p.draft
    assert d.kind == "mtp" and d.n_layer == 1
    assert (p.settings.draft_topk, p.settings.draft_depth, p.settings.tree_tokens) == (1, 3, 4)
    g = group_weights(p.model)
    assert _on(p, LineKind.DRAFT_WEIGHTS) == d.weight_bytes > sum(g.per_layer) // 6  # a layer + eh_proj
    # its own one-layer MLA cache over the context's cells and a chain's, padded to 256 as llama.cpp pads it
    assert _on(p, LineKind.DRAFT_KV) == 4352 * (128 + 32) * 2
    assert 0 < d.read_bytes < d.weight_bytes  # an MoE layer reads 4 of 16 experts
    assert "MTP token" in p.estimate.basis


def test_mtp_emits_draft_mtp_without_a_draft_file(capsys, v3_config):
    code = main(["plan", "--model", v3_config, "--quant", "Q8_0", "--gpu", "4090", "--ram", "64", "--draft", "mtp",
                 "--emit", "llama-server", "--json"])
    cmd = json.loads(capsys.readouterr()[0])["emit"]["command"]
    assert code == 0 and "--spec-type draft-mtp" in cmd and "--spec-draft-model" not in cmd
    code = main(["plan", "--model", v3_config, "--quant", "F16", "--gpu", "4090", "--ram", "64", "--draft", "mtp",
                 "--emit", "vllm", "--json"])
    cmd = json.loads(capsys.readouterr()[0])["emit"]["command"]
    assert '"method":"mtp"' in cmd


def test_mtp_for_a_model_without_mtp_layers_is_a_usage_error(capsys):
    code = main(["plan", "--model", "llama-3.1-8b-q4", "--gpu", "4090", "--draft", "mtp"])
    _, err = capsys.readouterr()
    assert code == 2 and "no MTP layers" in err and "hint:" in err


def _header_gguf(path, arch: str, md: dict, tensors: dict[str, tuple[int, ...]]):
    from gguf import GGUFValueType, GGUFWriter

    w = GGUFWriter(str(path), arch)
    for k, v in md.items():
        w.add_key_value(f"{arch}.{k}", v, GGUFValueType.UINT32)
    for name, shape in tensors.items():
        w.add_tensor(name, np.zeros(tuple(reversed(shape)), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_gguf_mtp_block_is_split_from_the_trunk(tmp_path):
    md = {"block_count": 3, "embedding_length": 32, "attention.head_count": 2, "nextn_predict_layers": 1,
          "expert_count": 4, "expert_used_count": 2, "expert_feed_forward_length": 16}
    tensors = {"token_embd.weight": (32, 100), "output.weight": (32, 100)}
    for i in range(3):
        tensors[f"blk.{i}.attn_q.weight"] = (32, 32)
        tensors[f"blk.{i}.ffn_up_exps.weight"] = (32, 16, 4)
    tensors["blk.2.nextn.eh_proj.weight"] = (64, 32)
    spec = model_spec_from_gguf(read_gguf_header(_header_gguf(tmp_path / "m.gguf", "glm4moe", md, tensors)))
    assert (spec.n_layer, spec.n_nextn_layer) == (2, 1)
    g = group_weights(spec)
    assert g.mtp == (32 * 32 + 32 * 16 * 4 + 64 * 32) * 4
    assert sum(g.per_layer) == 2 * (32 * 32 + 32 * 16 * 4) * 4


@pytest.mark.parametrize("arch,note", [("minimax-m3", "special cache"), ("mamba", "")])
def test_any_header_listed_architecture_is_planned(tmp_path, arch, note):
    """A model llama.cpp loads is never refused: its weights are its tensors; an unknown KV rule warns."""
    md = {"block_count": 2, "embedding_length": 32}
    if arch == "mamba":
        md.update({"ssm.conv_kernel": 4, "ssm.inner_size": 64, "ssm.state_size": 16, "ssm.time_step_rank": 2})
    else:
        md.update({"attention.head_count": 2})
    tensors = {"token_embd.weight": (32, 100), "blk.0.x.weight": (32, 32), "blk.1.x.weight": (32, 32)}
    path = _header_gguf(tmp_path / "m.gguf", arch, md, tensors)
    p = make_plan(PlanRequest(model=str(path), gpu="none", ram=16, draft="none"))
    assert _on(p, LineKind.WEIGHTS) == (32 * 100 + 2 * 32 * 32) * 4
    if arch == "mamba":
        assert _on(p, LineKind.TARGET_KV) == 0
        assert _on(p, LineKind.RECURRENT_STATE) == 2 * (3 * 64 + 16 * 64) * 4  # conv + ssm state, one sequence
    assert any(note in n for n in p.notes) if note else not any(n.startswith("warning") for n in p.notes)

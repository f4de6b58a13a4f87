"""Placement and speed for the new families, through the path `homespec plan` takes.

Qwen3-30B-A3B is read from its published config.json (written here: 48 layers, width 2048, 32 heads, 4 KV
heads of 128, 128 experts of which 8 per token, expert width 768, vocabulary 151936) with --quant Q4_K_M,
the worked example of docs/planner.md.
"""

from __future__ import annotations

import json

import pytest

from homespec.cli import main
from homespec.plan.api import PlanRequest, make_plan
from homespec.plan.devices import HOST
from homespec.plan.fit import FITS, FITS_OFFLOADED
from homespec.plan.lines import LineKind
from homespec.plan.render import to_json
from homespec.quant.weights import active_params, group_weights, is_expert_tensor

QWEN3_30B_A3B = {  # https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936,
    "max_position_embeddings": 40960, "rope_theta": 1000000.0, "tie_word_embeddings": False,
    "use_sliding_window": False, "sliding_window": None, "torch_dtype": "bfloat16",
}


@pytest.fixture(scope="module")
def qwen3_moe_config(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen3-30b-a3b")
    (d / "config.json").write_text(json.dumps(QWEN3_30B_A3B))
    return str(d / "config.json")


def _plan(config, **kw):
    kw.setdefault("draft", "none")
    return make_plan(PlanRequest(model=config, quant="Q4_K_M", **kw))


def _on(plan, kind, device):
    return sum(i.bytes for i in plan.items if i.kind == kind and i.device == device)


def test_moe_spec_from_config_counts_experts(qwen3_moe_config):
    m = _plan(qwen3_moe_config, gpu="none", ram=64).model
    assert (m.n_expert, m.n_expert_used, m.n_ff_exp) == (128, 8, 768)
    g = group_weights(m)
    assert 30.4e9 < g.n_params < 30.6e9  # "30.5B" on the model card
    assert 3.2e9 < active_params(m) < 3.4e9  # "3.3B activated"
    # every layer's three expert tensors, and nothing else, are what --n-cpu-moe moves
    assert sum(g.per_layer_exps) == sum(t.n_bytes for t in m.tensors if "_exps" in t.name)


def test_whole_model_on_a_3090_at_32k(qwen3_moe_config):
    p = _plan(qwen3_moe_config, gpu="3090", ram=64, ctx=32768)
    assert p.verdict == FITS and (p.settings.n_cpu_moe or 0) == 0
    assert any("every expert on the GPU" in n for n in p.notes)


def test_solver_keeps_the_fewest_layers_experts_in_ram(qwen3_moe_config):
    p = _plan(qwen3_moe_config, gpu="rtx-3060-12g", ram=64, ctx=32768)
    k = p.settings.n_cpu_moe
    assert p.verdict == FITS_OFFLOADED and 0 < k < 48 and p.offloaded_layers == 0
    assert "--n-cpu-moe" in to_json(p)["message"]
    # with one layer fewer in RAM the whole model no longer fits on the GPU: whole layers go instead
    tighter = _plan(qwen3_moe_config, gpu="rtx-3060-12g", ram=64, ctx=32768, n_cpu_moe=k - 1)
    assert tighter.settings.n_cpu_moe == k - 1 and tighter.settings.n_gpu_layers < 49
    # the host holds exactly those layers' experts (plus the embeddings), in llama.cpp's one mmapped buffer
    # spanning the file from token_embd to the last of them: the attention tensors between them count too
    g = group_weights(p.model)
    names = [t.name for t in p.model.tensors]
    first = names.index("token_embd.weight")
    last = max(i for i, t in enumerate(p.model.tensors) if t.layer == k - 1 and is_expert_tensor(t.name))
    span = sum(t.n_bytes for t in p.model.tensors[first:last + 1])
    assert span > sum(g.per_layer_exps[:k]) + g.embd + g.other
    assert _on(p, LineKind.WEIGHTS, HOST) == span


def test_fixed_n_cpu_moe_is_kept_and_slows_decoding(qwen3_moe_config):
    free = _plan(qwen3_moe_config, gpu="3090", ram=64)
    pinned = _plan(qwen3_moe_config, gpu="3090", ram=64, n_cpu_moe=48)
    assert pinned.settings.n_cpu_moe == 48 and pinned.verdict == FITS_OFFLOADED
    assert any("as asked" in n for n in pinned.notes)
    assert pinned.estimate.plain_tokens_per_s < free.estimate.plain_tokens_per_s


def test_speed_reads_only_the_active_experts(qwen3_moe_config):
    p = _plan(qwen3_moe_config, gpu="3090", ram=64, ctx=4096)
    g = group_weights(p.model)
    gpu_read = next(ld.read_bytes for ld in _loads(p) if ld.device.id == 0)
    exps = sum(g.per_layer_exps)
    weights = _on(p, LineKind.WEIGHTS, 0)
    kv = _on(p, LineKind.TARGET_KV, 0)
    assert gpu_read == pytest.approx(weights - exps + exps * 8 / 128 + kv / 2, rel=1e-6)


def _loads(plan):
    from homespec.plan.place import placer

    return placer("llamacpp").layout(plan.model, plan.draft, plan.machine, plan.settings).loads


def test_parallel_budgets_every_sequence(qwen3_moe_config):
    one = _plan(qwen3_moe_config, gpu="none", ram=256)
    four = _plan(qwen3_moe_config, gpu="none", ram=256, parallel=4)
    assert _on(four, LineKind.TARGET_KV, HOST) == 4 * _on(one, LineKind.TARGET_KV, HOST)
    assert to_json(four)["parallel"] == 4 and to_json(four)["settings"]["parallel"] == 4


def test_swa_full_keeps_the_whole_context():
    window = make_plan(PlanRequest(model="gemma-3-27b-q4", gpu="none", ram=256, ctx=32768, draft="none"))
    full = make_plan(PlanRequest(model="gemma-3-27b-q4", gpu="none", ram=256, ctx=32768, draft="none", swa_full=True))
    m = window.model
    per_layer = 32768 * m.n_head_kv * (m.head_dim + m.head_dim) * 2
    assert _on(full, LineKind.TARGET_KV, HOST) == m.n_layer * per_layer
    assert _on(window, LineKind.TARGET_KV, HOST) < _on(full, LineKind.TARGET_KV, HOST) / 4


def test_cli_flags_and_json(capsys, qwen3_moe_config):
    code = main(["plan", "--model", qwen3_moe_config, "--quant", "Q4_K_M", "--gpu", "rtx-3060-12g", "--ram", "64",
                 "--n-cpu-moe", "30", "--parallel", "2", "--draft", "none", "--json"])
    out, _ = capsys.readouterr()
    p = json.loads(out)
    assert code == 0 and p["settings"]["n_cpu_moe"] == 30 and p["parallel"] == 2
    assert p["model"]["n_expert"] == 128 and p["model"]["n_params_active"] < p["model"]["n_params"] / 8


@pytest.mark.parametrize("args", [["--parallel", "0"], ["--n-cpu-moe", "-1"]])
def test_bad_family_flags_are_usage_errors(capsys, qwen3_moe_config, args):
    code = main(["plan", "--model", qwen3_moe_config, "--quant", "Q4_K_M", "--gpu", "none", "--draft", "none", *args])
    _, err = capsys.readouterr()
    assert code == 2 and "error:" in err and "hint:" in err


def test_llama_server_flags_for_experts_in_ram_and_slots(capsys, qwen3_moe_config):
    from test_plan_emit import flags_of, server_flags

    accepted, removed = server_flags()
    cases = {("--gpu", "rtx-3060-12g", "--ctx", "32768"): "--n-cpu-moe",
             ("--gpu", "3090", "--n-cpu-moe", "48"): "--cpu-moe",
             ("--gpu", "3090", "--parallel", "4", "--ctx", "8192"): "-np"}
    for args, expected in cases.items():
        code = main(["plan", "--model", qwen3_moe_config, "--quant", "Q4_K_M", "--ram", "64", "--draft", "none",
                     "--emit", "llama-server", "--json", *args])
        command = json.loads(capsys.readouterr()[0])["emit"]["command"]
        assert code == 0
        flags = dict(flags_of(command))
        assert expected in flags, command
        for flag in flags:
            assert flag in accepted and flag not in removed, (flag, command)
    assert flags["-c"] == str(4 * 8192) and flags["-np"] == "4"  # -c is every slot's context together


def test_vllm_expert_parallel_on_two_gpus(capsys, qwen3_moe_config):
    code = main(["plan", "--model", qwen3_moe_config, "--quant", "F16", "--gpu", "4090,4090", "--ram", "128",
                 "--draft", "none", "--emit", "vllm", "--json"])
    command = json.loads(capsys.readouterr()[0])["emit"]["command"]
    assert code in (0, 3) and "--enable-expert-parallel" in command and "--tensor-parallel-size 2" in command


# Published Qwen3-30B-A3B Q4_K_M decode rates: (GPU, RAM bandwidth GB/s or None, --n-cpu-moe, tok/s).
PUBLISHED = [
    ("rtx-3090-ti", None, 0, 166.9),  # smeltcore.com/recipes/qwen3-30b-a3b-rtx-3090-ti, 4K context
    ("rtx-4090", None, 0, 196.0),  # runaihome.com/blog/qwen3-30b-a3b-local-ai-guide-2026
    # RTX 2080 8 GB + i9-10900X (quad-channel DDR4, 102 GB/s measured), -ngl 99 --n-cpu-moe 36
    # (github.com/AlexsJones/llmfit pull 755)
    ("rtx-2080", 102.0, 36, 36.7),
]


@pytest.mark.parametrize("gpu,ram_gbs,n_cpu_moe,measured", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_estimate_meets_published_moe_decode_rates(qwen3_moe_config, gpu, ram_gbs, n_cpu_moe, measured):
    from homespec.catalog import load_catalog
    from homespec.formats.hf import model_spec_from_hf_config
    from homespec.plan.fit import solve
    from homespec.plan.settings import Settings
    from homespec.plan.suggest import advise
    from homespec.types import GPU, Machine

    m = model_spec_from_hf_config(qwen3_moe_config, "Q4_K_M")
    card = (GPU(name="RTX 2080", vendor="nvidia", total_bytes=8 << 30, bandwidth_gbs=448, source="catalogue")
            if gpu == "rtx-2080" else load_catalog().gpu(gpu))
    machine = Machine(gpus=(card,), ram_bytes=64 << 30, cpu_cores=10, ram_bandwidth_gbs=ram_gbs, source="catalogue")
    p = advise(solve(m, None, machine, Settings(n_ctx=4096, n_cpu_moe=n_cpu_moe)))
    assert p.estimate.plain_tokens_per_s == pytest.approx(measured, rel=0.10)


QWEN3_NEXT_80B = {  # https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json
    "architectures": ["Qwen3NextForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 48, "vocab_size": 151936,
    "head_dim": 256, "num_attention_heads": 16, "num_key_value_heads": 2, "num_experts": 512, "num_experts_per_tok": 10,
    "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "linear_num_key_heads": 16,
    "linear_key_head_dim": 128, "linear_num_value_heads": 32, "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "tie_word_embeddings": False,
    "intermediate_size": 5120, "max_position_embeddings": 262144,
}


def test_hybrid_moe_from_config(tmp_path):
    """Qwen3-Next-80B-A3B: 80B parameters, 3B active; 36 Gated DeltaNet layers hold 75.4 MiB of state per
    sequence and only the 12 attention layers a KV cache."""
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_NEXT_80B))
    p = make_plan(PlanRequest(model=str(tmp_path / "config.json"), quant="Q4_K_M", gpu="none", ram=256, ctx=32768, draft="none"))
    m = p.model
    assert len(m.recurrent_layers) == 36 and (m.rs_r, m.rs_s) == (24576, 524288)
    assert group_weights(m).n_params == pytest.approx(79.67e9, rel=0.005)
    assert active_params(m) == pytest.approx(3.87e9, rel=0.01)
    assert _on(p, LineKind.RECURRENT_STATE, HOST) == 36 * (24576 + 524288) * 4
    assert _on(p, LineKind.TARGET_KV, HOST) == 12 * 32768 * 2 * (256 + 256) * 2


def test_n_cpu_moe_on_a_dense_model_says_it_does_nothing():
    p = make_plan(PlanRequest(model="llama-3.1-8b-q4", gpu="4090", ram=64, draft="none", n_cpu_moe=8))
    assert p.verdict == FITS and any("has no effect" in n for n in p.notes)


def test_verifying_a_tree_reads_more_experts(qwen3_moe_config):
    """Each drafted token routes to its own 8 of 128 experts: T tokens touch 1 - (15/16)^T of them."""
    p = _plan(qwen3_moe_config, gpu="3090", ram=64, ctx=4096)
    gpu = next(ld for ld in _loads(p) if ld.device.id == 0)
    exps = sum(group_weights(p.model).per_layer_exps)
    assert gpu.bytes_for(1) == gpu.read_bytes
    assert gpu.bytes_for(4) == pytest.approx(gpu.read_bytes + exps * ((1 - (15 / 16) ** 4) - 1 / 16))
    assert gpu.bytes_for(1000) == pytest.approx(gpu.read_bytes + exps * (15 / 16), rel=1e-3)  # every expert once

"""homespec.catalog: every entry loads with sane numbers; names resolve; drafts pair with targets."""

from __future__ import annotations

import tomllib

import pytest

from homespec.catalog import DEFAULT_QUANT, load_catalog
from homespec.errors import UsageError
from homespec.quant.shapes import n_params
from homespec.quant.tables import GGML_TYPES, profiles_dir

GIB = 1 << 30


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


def test_every_entry_names_its_source():
    root = profiles_dir()
    files = [root / "gpus.toml", root / "drafts.toml", *sorted((root / "models").glob("*.toml"))]
    for path in files:
        data = tomllib.loads(path.read_text())
        for kind in ("gpu", "apple", "model", "draft"):
            for entry in data.get(kind, []):
                assert "huggingface.co" in entry["source"] or entry["source"].startswith("https://"), entry


def test_gpus_are_sane(cat):
    assert len(cat.gpus) >= 35
    unified = {u["name"] for u in tomllib.loads((profiles_dir() / "gpus.toml").read_text()).get("unified", [])}
    for g in cat.gpus:
        assert g.vendor in ("nvidia", "apple", "intel", "amd")
        assert 8 * GIB <= g.total_bytes <= 512 * GIB, g
        assert 200 <= g.bandwidth_gbs <= 5000, g
        # Macs and the [[unified]] machines (Strix Halo, DGX Spark) share their RAM with the GPU
        assert g.unified == (g.vendor == "apple" or any(g.name.startswith(n[:-1]) for n in unified)), g
        assert g.fp16_tflops is None or 5 <= g.fp16_tflops <= 1000
        if g.vendor == "nvidia":
            assert g.compute_capability and (g.fp16_tflops or g.unified)  # GB10: no dense fp16 figure published
    assert cat.gpu("h200").total_bytes > cat.gpu("h100").total_bytes > cat.gpu("a100-40g").total_bytes


@pytest.mark.parametrize("name,want", [
    ("4090", "NVIDIA GeForce RTX 4090"), ("rtx4090", "NVIDIA GeForce RTX 4090"),
    ("RTX 4090", "NVIDIA GeForce RTX 4090"), ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ("3090ti", "NVIDIA GeForce RTX 3090 Ti"), ("RTX 3090 Ti", "NVIDIA GeForce RTX 3090 Ti"),
    ("a6000", "NVIDIA RTX A6000"), ("rtx-a6000", "NVIDIA RTX A6000"), ("3060 12GB", "NVIDIA GeForce RTX 3060 12GB"),
    ("m3-ultra-512", "Apple M3 Ultra (512 GB)"), ("M3 Ultra 96GB", "Apple M3 Ultra (96 GB)"),
    ("m2-max-96", "Apple M2 Max (96 GB)"), ("m4_max_128", "Apple M4 Max (128 GB)"),
])
def test_gpu_aliases(cat, name, want):
    assert cat.gpu(name).name == want


def test_apple_memory_options(cat):
    m3u = cat.gpu("m3-ultra-512")
    assert m3u.total_bytes == 512 * GIB and m3u.bandwidth_gbs == 819.0 and m3u.unified
    assert cat.gpu("m3-max-36").bandwidth_gbs == 300.0 and cat.gpu("m3-max-48").bandwidth_gbs == 400.0


def test_unknown_gpu_names_the_nearest(cat):
    with pytest.raises(UsageError) as e:
        cat.gpu("rtx 4009")
    assert "nearest" in e.value.hint and "4090" in e.value.hint


def _bits(ggml_type: str) -> float:
    block, nbytes = GGML_TYPES[ggml_type]
    return nbytes * 8 / block


def test_every_model_is_sane(cat):
    assert len(cat.models) >= 50
    for mid in cat.models:
        m = cat.model(mid)
        assert m.quant == DEFAULT_QUANT and m.family == mid and m.format == "catalogue"
        assert m.n_embd % m.n_head == 0 or m.n_head * m.head_dim != m.n_embd  # Nemo/Gemma: explicit head_dim
        assert m.n_head % m.n_head_kv == 0
        if m.kv_lora_rank:  # MLA: llama.cpp stores one shared latent "head" of kv_lora_rank + the RoPE part
            assert (m.n_head_kv, m.head_dim, m.head_dim_v) == (1, m.kv_lora_rank + m.qk_rope_head_dim, m.kv_lora_rank)
        else:
            assert m.head_dim in (64, 128, 256)
        # the parameter count the entry states (a model card's "671B", "1T") is the summed tensor shapes
        # to the card's rounding: Kimi-K2's "1T" is 1.026e12 summed, Llama-4-Scout's 109B counts its
        # vision tower, which the text-only GGUF does not hold (-1.1%)
        shapes = n_params(cat.entry(mid).spec)
        assert 1e8 < shapes and abs(shapes - m.n_params) <= 0.03 * m.n_params, (mid, shapes, m.n_params)
        # Q4_K_M: every quantisable weight starts at Q4_K and the quantiser only raises it, to at
        # most Q8_0; a tensor the converter already wrote quantised keeps its type (gpt-oss's MXFP4
        # experts); norms, biases and routers stay F32. Bounds per model from its own tensors:
        q = sum(t.n_elements for t in m.tensors if t.ggml_type != "F32")
        f32 = sum(t.n_elements for t in m.tensors if t.ggml_type == "F32")
        lo = _bits("MXFP4") if m.arch == "gpt-oss" else _bits("Q4_K")
        bits = sum(t.n_bytes for t in m.tensors) * 8
        assert lo * q + 32 * f32 <= bits <= _bits("Q8_0") * q + 32 * f32, (mid, bits / (q + f32))
        assert m.source.startswith("https://huggingface.co/")


@pytest.mark.parametrize("mid,published", [
    # parameter counts Hugging Face shows on each model page (safetensors metadata)
    ("llama-3.1-8b", 8_030_261_248), ("llama-3.1-70b", 70_553_706_496), ("qwen2.5-7b", 7_615_616_512),
    ("mistral-7b", 7_248_023_552), ("gemma-2-9b", 9_241_705_984), ("smollm2-135m", 134_515_008),
    ("phi-4", 14_659_507_200),
])
def test_param_counts_match_published(cat, mid, published):
    assert cat.entry(mid).spec.n_params == published


def test_sliding_window_layers(cat):
    g2 = cat.entry("gemma-2-9b").spec
    assert g2.sliding_window == 4096 and g2.swa_layers == tuple(range(0, 42, 2))
    g3 = cat.entry("gemma-3-12b").spec
    assert len(g3.swa_layers) == 40 and 5 not in g3.swa_layers and 4 in g3.swa_layers


@pytest.mark.parametrize("name,entry,quant", [
    ("llama-3.1-70b-q4", "llama-3.1-70b", "Q4_K_M"), ("llama-3.1-70b", "llama-3.1-70b", "Q4_K_M"),
    ("qwen2.5-7b-q8", "qwen2.5-7b", "Q8_0"), ("smollm2-135m-q4_1", "smollm2-135m", "Q4_1"),
    ("smollm2-135m-instruct-q4_1", "smollm2-135m", "Q4_1"), ("Llama3.1-8B-Instruct-Q5_K_M", "llama-3.1-8b", "Q5_K_M"),
    ("qwen2.5-72b-iq4_xs", "qwen2.5-72b", "IQ4_XS"), ("gemma-2-9b-it-q6", "gemma-2-9b", "Q6_K"),
    ("mistral-7b-exl2-4.65", "mistral-7b", "exl2-4.65"), ("mistral-nemo-4.0bpw", "mistral-nemo-12b", "exl2-4"),
])
def test_model_resolution(cat, name, entry, quant):
    m = cat.model(name)
    assert m.family == entry and m.quant == quant
    if quant.startswith("exl2"):
        assert any(t.ggml_type == "EXL2" for t in m.tensors)
    else:
        assert all(t.ggml_type != "EXL2" for t in m.tensors)


def test_unknown_model_names_the_nearest(cat):
    with pytest.raises(UsageError) as e:
        cat.model("lama-3.1-8b")
    assert "llama-3.1-8b" in e.value.hint
    with pytest.raises(UsageError) as e:
        cat.model("qwen2.5-7b-q9")  # the model resolves, the quant does not
    assert "Q4_K_M" in e.value.hint


def test_published_head_pairing(cat):
    d = cat.draft_for(cat.model("llama-3.1-8b"))
    assert d.name == "eagle3-llama3.1-8b" and d.kind == "eagle3"
    t = {x.name: x.shape for x in d.tensors}
    # facts: fc [4096, 12288], q [4096, 8192], k/v [1024, 8192], lm_head [32000, 4096] (torch order)
    assert t["fc.weight"] == (12288, 4096) and t["midlayer.self_attn.q_proj.weight"] == (8192, 4096)
    assert t["midlayer.self_attn.k_proj.weight"] == (8192, 1024) and t["lm_head.weight"] == (4096, 32000)
    assert t["d2t"] == (32000,) and t["t2d"] == (128256,)
    params = 12288 * 4096 + 8192 * 4096 + 2 * 8192 * 1024 + 4096 * 4096 + 3 * 4096 * 14336 + 4 * 4096 + 32000 * 4096
    assert d.weight_bytes == params * 2 + 32000 * 8 + 128256
    assert cat.draft("yuhuili/EAGLE3-LLaMA3.1-Instruct-8B") == d == cat.draft("eagle3-llama-3.1-8b")


def test_smollm2_head_is_eagle3_1(cat):
    d = cat.draft_for(cat.model("smollm2-135m-q4_1"))
    assert d.kind == "eagle3.1" and d.fc_norm and d.norm_output
    assert (d.n_embd, d.n_head, d.n_head_kv, d.head_dim, d.n_ff, d.draft_vocab) == (576, 9, 3, 64, 1536, 8192)
    names = {t.name for t in d.tensors}
    assert {"fc_norm.0.weight", "fc_norm.2.weight"} <= names
    params = sum(t.n_elements for t in d.tensors if t.ggml_type == "F32")
    assert d.weight_bytes == params * 4 + 8192 * 8 + 49152


def test_derived_head_when_none_is_published(cat):
    d = cat.draft_for(cat.model("gemma-2-9b"))
    assert d.kind == "eagle3.1" and "homespec-trainable" in d.source
    assert d.target_hidden == 3584 and d.draft_vocab == 32000 and d.target_vocab == 256000
    assert cat.draft("homespec-eagle3.1-gemma-2-9b") == d
    with pytest.raises(UsageError):
        cat.draft("eagle3-nothing")


@pytest.mark.parametrize("typo", ["m3ultra96x", "m3 ultra 96gb x", "306012x", "rtx 4009", "h2000", "zzzz"])
def test_gpu_hints_name_catalogue_ids_that_resolve(cat, typo):
    with pytest.raises(UsageError) as e:
        cat.gpu(typo)
    names = e.value.hint.split(": ", 1)[1].removesuffix(", ...").split(", ")
    assert names and all(n in {cat.gpu_id(g) for g in cat.gpus} for n in names), e.value.hint
    for n in names:
        cat.gpu(n)


def test_the_shipped_heads_catalogue_entry_carries_its_recorded_acceptance(cat):
    from homespec.embedded import HEADS_DIR
    from homespec.formats.acceptance import read_records
    from homespec.formats.eagle import draft_spec_from_checkpoint

    recorded = read_records(HEADS_DIR / "smollm2-135m-instruct")
    assert recorded and {r.total for r in recorded} == {5, 48}
    assert [r.at_least for r in cat.draft("homespec-eagle3.1-smollm2-135m").acceptance] == [r.at_least for r in recorded]
    assert [r.at_least for r in draft_spec_from_checkpoint(HEADS_DIR / "smollm2-135m-instruct").acceptance] == \
        [r.at_least for r in recorded]

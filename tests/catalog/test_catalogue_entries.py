"""profiles/: the 2025-26 entries carry sources, agree with themselves and plan without a traceback.

Model entries live in profiles/models/ (loaded by homespec.catalog). They are checked as data here,
then go through load_catalog() and a real `homespec plan` subprocess.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from homespec.catalog import load_catalog
from homespec.quant.shapes import model_tensor_shapes
from homespec.quant.tables import profiles_dir

ROOT = profiles_dir()
REPO = Path(__file__).resolve().parents[2]

# the keys a [[model]] entry may carry: today's (homespec/catalog.py) and the 2025-26 families'
# (docs/catalogue.md, "Keys for the 2025-26 families")
BASE_KEYS = {"id", "name", "arch", "n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab",
             "n_ctx_train", "rope_theta", "tied", "sliding_window", "swa_pattern", "aliases", "source"}
NEW_KEYS = {"n_params", "n_params_active", "n_expert", "n_expert_used", "n_ff_exp", "n_expert_shared", "n_ff_shexp",
            "n_layer_dense_lead", "moe_every", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
            "v_head_dim", "full_attn_interval", "linear_num_key_heads", "linear_key_head_dim",
            "linear_num_value_heads", "linear_value_head_dim", "linear_conv_kernel_dim", "n_nextn_layer", "file"}
FILE_KEYS = {"quant", "bytes", "repo", "source"}

# the 2025-26 entries
NEW_MODELS = ("gpt-oss-20b", "gpt-oss-120b", "qwen3-30b-a3b", "qwen3-235b-a22b", "qwen3-next-80b-a3b",
              "glm-4.5-air", "llama-4-scout", "gemma-3-27b", "mistral-small-3.2-24b", "deepseek-v3",
              "deepseek-r1", "kimi-k2", "phi-4")
NEW_GPUS = ("rtx-5090", "rtx-5080", "rtx-5070-ti", "rtx-pro-6000-blackwell", "arc-b580", "m4-max-36",
            "m4-max-128", "m3-ultra-96", "m3-ultra-512")
# what people type -> (entry, quant); the quant suffix rule is the catalogue's (docs/catalogue.md, "Names")
TYPED = (("qwen3-30b-a3b-q4", "qwen3-30b-a3b", "Q4_K_M"), ("gpt-oss-20b", "gpt-oss-20b", "Q4_K_M"),
         ("gpt-oss-120b-mxfp4_moe", "gpt-oss-120b", "MXFP4_MOE"), ("glm-4.5-air-q4", "glm-4.5-air", "Q4_K_M"),
         ("llama-4-scout-q4_k_m", "llama-4-scout", "Q4_K_M"), ("deepseek-r1", "deepseek-r1", "Q4_K_M"),
         ("qwen3-235b-a22b-q8", "qwen3-235b-a22b", "Q8_0"), ("mistral-small-3.2-q8", "mistral-small-3.2-24b", "Q8_0"),
         ("gemma-3-27b-it-q4", "gemma-3-27b", "Q4_K_M"), ("kimi-k2-q2", "kimi-k2", "Q2_K"))


def _toml(path: Path) -> dict:
    return tomllib.loads(path.read_text())


def _models(folder: str) -> list[tuple[str, dict]]:
    return [(f"{folder}/{p.name}", m) for p in sorted((ROOT / folder).glob("*.toml")) for m in _toml(p).get("model", [])]


ALL = _models("models")
BY_ID = {m["id"]: m for _, m in ALL}
GPUS = _toml(ROOT / "gpus.toml")
DRAFTS = _toml(ROOT / "drafts.toml")["draft"]
QUANTS = _toml(ROOT / "quants.toml")


def _ids(entries):
    return [m["id"] for _, m in entries]


@pytest.fixture(scope="module")
def cat():
    return load_catalog()


# --- sources and keys -------------------------------------------------------------------------

def test_every_entry_carries_a_source_url():
    sections = [("model", m) for _, m in ALL] + [("draft", d) for d in DRAFTS]
    sections += [(kind, e) for kind in ("gpu", "apple", "unified") for e in GPUS.get(kind, [])]
    for kind, e in sections:
        assert e["source"].startswith("https://") or "https://huggingface.co/" in e["source"], (kind, e)
    for _, m in ALL:
        assert m["source"].startswith("https://huggingface.co/") and m["source"].endswith("/config.json"), m["id"]


def test_model_entries_use_only_the_catalogue_keys():
    for where, m in ALL:
        assert set(m) <= BASE_KEYS | NEW_KEYS, (where, m["id"], set(m) - BASE_KEYS - NEW_KEYS)
        for f in m.get("file", []):
            assert set(f) == FILE_KEYS, (m["id"], f)
            assert re.fullmatch(r"[\w.-]+/[\w.-]+", f["repo"]) and f["source"].startswith(
                f"https://huggingface.co/{f['repo']}"), (m["id"], f)
            assert isinstance(f["bytes"], int) and f["bytes"] > 0


def test_every_new_model_is_in_the_catalogue_once():
    ids = _ids(ALL)
    assert len(ids) == len(set(ids))
    assert set(NEW_MODELS) <= set(ids), set(NEW_MODELS) - set(ids)


# --- internal consistency ---------------------------------------------------------------------

@pytest.mark.parametrize("mid", _ids(ALL))
def test_shapes_agree_with_themselves(mid):
    m = BY_ID[mid]
    assert m["n_head"] % m["n_head_kv"] == 0 and m["n_layer"] > 0 and m["n_vocab"] > 1000
    if "kv_lora_rank" in m:  # MLA: the per-head key is the non-RoPE part plus the RoPE part
        assert m["head_dim"] == m["qk_nope_head_dim"] + m["qk_rope_head_dim"]
        assert m["kv_lora_rank"] < m["n_embd"] and m["q_lora_rank"] < m["n_embd"] and m["v_head_dim"] <= m["head_dim"]
    elif m["arch"] in ("qwen2", "phi3", "llama4"):  # configs that derive head_dim = hidden / heads
        assert m["n_head"] * m["head_dim"] == m["n_embd"], mid
    else:
        assert m["head_dim"] in (64, 128, 256), mid
    if "sliding_window" in m:
        assert m["sliding_window"] < m["n_ctx_train"] and 2 <= m["swa_pattern"] <= m["n_layer"]
    if "full_attn_interval" in m:  # hybrid: whole groups of linear layers plus one attention layer
        assert m["n_layer"] % m["full_attn_interval"] == 0
        assert m["linear_num_value_heads"] % m["linear_num_key_heads"] == 0


@pytest.mark.parametrize("mid", [i for i in _ids(ALL) if "n_expert" in BY_ID[i]])
def test_moe_numbers_agree(mid):
    m = BY_ID[mid]
    assert 1 <= m["n_expert_used"] <= m["n_expert"] and m["n_ff_exp"] > 0
    assert m.get("n_layer_dense_lead", 0) < m["n_layer"] and m.get("moe_every", 1) >= 1
    if m.get("n_expert_shared"):
        assert m["n_ff_shexp"] > 0
    assert 0 < m["n_params_active"] < m["n_params"]
    # a token skips most experts, and experts are most of an MoE model's weights
    assert m["n_params_active"] / m["n_params"] < 0.5
    assert m.get("n_nextn_layer", 0) in (0, 1, 2)


@pytest.mark.parametrize("mid", [i for i in _ids(ALL) if "n_params" in BY_ID[i]])
def test_parameter_counts_are_in_range(mid):
    m = BY_ID[mid]
    # every layer holds at least its attention projections
    attn = m["n_layer"] * m["n_embd"] * m["head_dim"] * (m["n_head"] + m["n_head_kv"])
    assert attn < m["n_params"] < 2e12


def _bits(tname: str) -> float:
    t = QUANTS["types"][tname]
    return t["bytes"] * 8 / t["block"]


def _bounds(quant: str, arch: str) -> tuple[float, float]:
    """Bits per weight a GGUF of this file type can average (profiles/quants.toml).

    The quantiser starts every 2-D weight at the file type's default type and only raises types
    (Q6_K/Q8_0 heads and more-bits layers, 32-block fallbacks), never above Q8_0 for a quantised
    type; F16/BF16 files keep the default. Unsloth's "UD-<type>_XL" mixes start from <type>_M's default.
    gpt-oss files keep the experts in MXFP4 whatever the file type: the converter writes them so
    (conversion/gpt_oss.py) and llama-quantize does not requantize them (src/llama-quant.cpp)."""
    ftype = re.sub(r"_XL$", "_M", quant.removeprefix("UD-"))
    default = _bits(QUANTS["ftypes"][ftype]["default"])
    lo = min(default, _bits("MXFP4")) if arch == "gpt-oss" else default
    hi = default if default >= 16 else max(default, _bits("Q8_0"))
    return lo, hi


# Listings print sizes and model cards print parameter counts to 3-4 significant figures (11.6 GB,
# 20.9B): half a unit in the last place of each is up to 0.5% of the ratio.
ROUNDING = 0.01


@pytest.mark.parametrize("mid,quant", [(m["id"], f["quant"]) for _, m in ALL for f in m.get("file", [])])
def test_published_file_sizes_match_the_parameter_count(cat, mid, quant):
    m = BY_ID[mid]
    f = next(f for f in m["file"] if f["quant"] == quant)
    n_params = m.get("n_params") or cat.entry(mid).spec.n_params  # loaded dense entries: summed shapes
    bpw = f["bytes"] * 8 / n_params
    lo, hi = _bounds(quant, m["arch"])
    assert lo * (1 - ROUNDING) <= bpw <= hi * (1 + ROUNDING), (mid, quant, bpw, lo, hi)


# the listing's rounding (3 significant figures, or 2 per shard) plus the GGUF's metadata
PREDICTION_SLACK = 0.02


@pytest.mark.parametrize("mid,quant", [(m["id"], f["quant"]) for _, m in ALL for f in m.get("file", [])])
def test_published_files_match_the_predicted_tensors(cat, mid, quant):
    f = next(f for f in BY_ID[mid]["file"] if f["quant"] == quant)
    predicted = sum(t.n_bytes for t in cat.model(f"{mid}-{quant}").tensors)
    assert abs(predicted - f["bytes"]) <= PREDICTION_SLACK * f["bytes"], (mid, quant, predicted, f["bytes"])


def test_the_size_bound_comes_from_the_quant_tables():
    assert _bounds("Q4_K_M", "qwen3moe") == (4.5, 8.5)
    assert _bounds("UD-Q4_K_XL", "qwen3moe") == (4.5, 8.5)
    assert _bounds("BF16", "qwen3moe") == (16.0, 16.0)
    assert _bounds("F16", "gpt-oss") == (4.25, 16.0)


# --- names ------------------------------------------------------------------------------------

def _model_names(m: dict) -> set[str]:
    # the catalogue's spellings (docs/catalogue.md, "Names"): case and spaces folded, and the
    # family/version dash optional ("llama-3.1-8b" <-> "llama3.1-8b")
    out = set()
    for n in (m["id"], m["name"], *m.get("aliases", [])):
        k = re.sub(r"[\s_]+", "-", n.strip().lower())
        out |= {k, re.sub(r"^([a-z]+)-(\d)", r"\1\2", k), re.sub(r"^([a-z]+)(\d)", r"\1-\2", k)}
    return out


def _gpu_names(names) -> set[str]:
    out = set()
    for n in names:
        k = re.sub(r"[\s\-_()]+", "", re.sub(r"\b(nvidia|geforce|apple)\b", "", n.strip().lower()))
        out |= {k, k.removeprefix("rtx")}
    return out


def test_model_names_are_unique_across_the_catalogue():
    owner: dict[str, str] = {}
    for _, m in ALL:
        for k in _model_names(m):
            assert owner.setdefault(k, m["id"]) == m["id"], (k, owner[k], m["id"])


def test_gpu_names_are_unique_across_the_catalogue():
    owner: dict[str, str] = {}
    entries = [(g["id"], [g["id"], g["name"], *g.get("aliases", [])]) for g in GPUS["gpu"]]
    for a in GPUS["apple"] + GPUS.get("unified", []):
        for mem in a["memory_gib"]:
            gid = f"{a['chip'].lower().replace(' ', '-')}-{mem}"
            entries.append((gid, [gid, *(f"{x}-{mem}" for x in a.get("aliases", []))]))
    for gid, names in entries:
        for k in _gpu_names(names):
            assert owner.setdefault(k, gid) == gid, (k, owner[k], gid)


@pytest.mark.parametrize("typed,mid,quant", TYPED)
def test_what_people_type_names_the_entry(cat, typed, mid, quant):
    m = cat.model(typed)
    assert m.family == mid and m.quant == quant


# --- loading and planning ---------------------------------------------------------------------

@pytest.mark.parametrize("mid", _ids(ALL))
def test_every_entry_loads_and_its_architecture_is_predicted(cat, mid):
    spec = cat.entry(mid).spec
    assert spec.n_params and spec.source == BY_ID[mid]["source"]
    if "n_params" in BY_ID[mid]:
        assert spec.n_params == BY_ID[mid]["n_params"]
    # an entry whose tensors homespec cannot lay out would fail every plan of it
    names = {n for n, _ in model_tensor_shapes(spec)}
    assert {"token_embd.weight", f"blk.{spec.n_layer - 1}.attn_norm.weight"} <= names, mid


@pytest.mark.parametrize("gid", NEW_GPUS)
def test_every_new_gpu_resolves(cat, gid):
    g = cat.gpu(gid)
    assert cat.gpu_id(g) == gid and g.bandwidth_gbs and g.total_bytes >= 12 << 30


@pytest.mark.parametrize("chip", [u["chip"] for u in GPUS.get("unified", [])])
def test_unified_machines_resolve_as_unified(cat, chip):
    u = next(x for x in GPUS["unified"] if x["chip"] == chip)
    assert u["vendor"] in ("amd", "nvidia") and 100 <= u["bandwidth_gbs"] <= 1000
    for mem in u["memory_gib"]:
        gid = f"{chip.lower().replace(' ', '-')}-{mem}"
        for name in (gid, *(f"{a}-{mem}" for a in u.get("aliases", []))):
            g = cat.gpu(name)
            assert cat.gpu_id(g) == gid and g.unified and g.vendor == u["vendor"]
            assert g.total_bytes == mem << 30 and g.bandwidth_gbs == u["bandwidth_gbs"]


def test_a_unified_machine_with_one_memory_option_answers_to_its_bare_alias(cat):
    assert cat.gpu_id(cat.gpu("strix-halo")) == "ryzen-ai-max+-395-128"
    assert cat.gpu_id(cat.gpu("DGX Spark")) == "gb10-128"


def test_every_draft_pairs_with_a_catalogue_target():
    for d in DRAFTS:
        for t in d["targets"]:
            m = BY_ID[t]
            assert d["target_vocab"] == m["n_vocab"] and d["target_hidden"] == m["n_embd"], (d["id"], t)


def test_the_kimi_head_loads_from_its_repo_id(cat):
    d = cat.draft("AQ-MedAI/Kimi-K2-Instruct-eagle3")
    assert d.name == "eagle3-kimi-k2" and d.kind == "eagle3" and d.draft_vocab == 32000
    shapes = {t.name: t.shape for t in d.tensors}
    assert shapes["fc.weight"] == (3 * 7168, 7168) and shapes["t2d"] == (163840,)


def _plan(gpu: str, model: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "homespec", "plan", "--gpu", gpu, "--model", model],
                          capture_output=True, text=True, timeout=120, env=env, cwd=REPO)


@pytest.mark.parametrize("gid", NEW_GPUS[:6] + NEW_GPUS[-1:])
def test_plan_runs_on_every_new_gpu(gid):
    r = _plan(gid, "qwen3-8b")
    assert r.returncode in (0, 3), r.stderr[-2000:]
    assert "Traceback" not in r.stderr and ("fits" in r.stdout or "does not fit" in r.stdout + r.stderr)


@pytest.mark.parametrize("mid", NEW_MODELS)
def test_plan_runs_for_every_new_model(mid):
    r = _plan("rtx-5090", mid)
    assert r.returncode in (0, 3), r.stderr[-2000:]
    assert "Traceback" not in r.stderr

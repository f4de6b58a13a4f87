"""The heads people run, against their real config.json (tests/data/heads/): the catalogue's shapes are
theirs, the planner's weights and KV follow from those shapes, and a checkpoint in each layout (weights
generated at a reduced width under the published key names) loads, pairs with a target of its
identity, and converts to an eagle3 GGUF that the pinned llama.cpp loads."""

from __future__ import annotations

import json

import pytest

from homespec.catalog import load_catalog
from homespec.draft_specs import draft_tensors
from published_heads import DRAFT_VOCAB, FIXTURES, HIDDEN, N_LAYER, VOCAB, layer_of, published, reduced, write_head
from tiny_heads import gguf_arch

# fixture folder -> the catalogue entry made from it
ENTRY = {"kimi-k2-instruct-eagle3": "eagle3-kimi-k2", "llama3.1-8b-speculators": "eagle3-llama3.1-8b",
         "redhat-llama3.1-8b": "redhat-eagle3-llama3.1-8b", "redhat-qwen3-8b": "redhat-eagle3-qwen3-8b",
         "redhat-gpt-oss-20b": "redhat-eagle3-gpt-oss-20b"}


def test_every_fixture_names_its_catalogue_entry():
    assert set(FIXTURES) == set(ENTRY) and len(FIXTURES) >= 4


def _as_entry(cfg: dict, dtype: str = "f32") -> dict:
    """A [[draft]] table written from a config.json the way profiles/drafts.toml's entries are."""
    from homespec.nets.eagle3 import Eagle3Config

    c = Eagle3Config.from_dict(cfg)
    return {"n_embd": c.hidden_size, "n_head": c.num_attention_heads, "n_head_kv": c.num_key_value_heads,
            "head_dim": c.head_dim, "n_ff": c.intermediate_size, "draft_vocab": c.draft_vocab_size,
            "target_vocab": c.vocab_size, "target_hidden": c.target_hidden_size, "dtype": dtype,
            "norm_before_fc": c.norm_before_fc}


@pytest.mark.parametrize("name", FIXTURES)
def test_the_catalogue_entry_has_the_published_shapes(name):
    entry = load_catalog().draft_entry(ENTRY[name])
    want = _as_entry(published(name), entry.get("dtype", "bf16"))
    got = {k: entry.get(k, False if k == "norm_before_fc" else None) for k in want}
    assert got == want
    ids = (published(name).get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
    assert entry.get("layer_ids") in (None, ids)


@pytest.mark.parametrize("name", FIXTURES)
def test_the_planner_counts_the_tensors_the_checkpoint_has(name, tmp_path):
    """The catalogue's tensor list (what plan budgets) is the checkpoint's, tensor for tensor, bytes
    for bytes, at the reduced width; the head's KV per token follows from the same shapes."""
    from homespec.formats.eagle import draft_spec_from_checkpoint

    cfg = reduced(published(name))
    spec = draft_spec_from_checkpoint(write_head(tmp_path / name, cfg))
    planned = {t.name: (t.shape, t.n_bytes) for t in draft_tensors(_as_entry(cfg))}
    on_disk = {t.name.replace("layers.0.", "midlayer."): (t.shape, t.n_bytes) for t in spec.tensors}
    assert on_disk == planned  # (embed_tokens, which speculators ships, is the target's and never loaded)
    layer = layer_of(cfg)
    assert spec.kv_dim == 2 * layer["num_key_value_heads"] * layer["head_dim"]
    assert (spec.target_hidden, spec.target_vocab, spec.draft_vocab) == (HIDDEN, VOCAB, DRAFT_VOCAB)


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    from tiny_models import make_tiny_gguf

    return make_tiny_gguf(tmp_path_factory.mktemp("target") / "tiny.gguf", n_layer=N_LAYER, n_embd=HIDDEN)


@pytest.mark.parametrize("name", FIXTURES)
def test_each_layout_loads_pairs_and_converts_for_llama_cpp(name, tmp_path, tiny_target):
    """The torch reference head loads it; head_gguf (the run's torch-free converter) writes the eagle3 GGUF
    llama.cpp loads, carrying the layout's flags and the target's tokenizer."""
    pytest.importorskip("llama_cpp")
    from gguf import GGUFReader

    from homespec.backends.llamacpp.head_convert import head_gguf
    from homespec.nets.eagle3 import load_head
    from homespec.sources.identity import mismatch, path_identity, target_identity

    cfg = reduced(published(name))
    folder = write_head(tmp_path / name, cfg)
    target = target_identity(tiny_target)
    assert mismatch(path_identity(folder), target) is None
    head = load_head(folder, N_LAYER, HIDDEN, VOCAB)
    assert head.config.norm_before_fc == bool(cfg.get("norm_before_fc"))
    converted = head_gguf(folder, tiny_target, dtype="f16", cache_dir=tmp_path / "cache")
    out = converted.path
    assert converted.kind == "eagle3" and not converted.cached and gguf_arch(out) == "eagle3"
    meta = {k: v.contents() for k, v in GGUFReader(str(out)).fields.items()}
    assert meta["eagle3.norm_before_fc"] == bool(cfg.get("norm_before_fc"))
    assert meta["eagle3.norm_before_residual"] == bool(cfg.get("norm_before_residual"))
    # the converted file carries the target's tokenizer: it pairs with the target exactly
    ident = path_identity(out)
    assert ident.tokenizer == target.tokenizer and mismatch(ident, target) is None


def test_a_head_of_another_width_is_refused_with_the_difference(tmp_path, tiny_target):
    from homespec.sources.identity import mismatch, path_identity, target_identity

    cfg = reduced(published("redhat-qwen3-8b"))
    layer_of(cfg)["vocab_size"] = VOCAB + 64
    folder = write_head(tmp_path / "wide", cfg)
    assert mismatch(path_identity(folder), target_identity(tiny_target)) == f"vocabulary {VOCAB + 64:,} vs {VOCAB:,} tokens"
    assert json.loads((folder / "config.json").read_text())["speculators_model_type"] == "eagle3"

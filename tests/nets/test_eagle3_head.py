"""The EAGLE-3 / 3.1 head alone: config, checkpoint layout, flags, tree attention in its KV."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from homespec.errors import FormatError, HomespecError
from homespec.nets.eagle3 import Eagle3Config, Eagle3Head, load_head, save_head

H, HEADS, KV, FF, VOCAB, DVOCAB = 32, 4, 2, 64, 300, 40


def _config(**kw) -> Eagle3Config:
    base = dict(
        hidden_size=H, num_attention_heads=HEADS, num_key_value_heads=KV, head_dim=H // HEADS,
        intermediate_size=FF, vocab_size=VOCAB, draft_vocab_size=DVOCAB, target_hidden_size=H,
    )
    base.update(kw)
    return Eagle3Config(**base)


def _head(seed=0, **kw) -> Eagle3Head:
    torch.manual_seed(seed)
    head = Eagle3Head(_config(**kw))
    with torch.no_grad():  # non-trivial norm weights so that every norm matters
        for name, p in head.named_parameters():
            if name.endswith("norm.weight") or ".norm" in name or "fc_norm" in name:
                p.copy_(1 + 0.2 * torch.randn_like(p))
        g = torch.Generator().manual_seed(seed)
        ids = torch.randperm(VOCAB, generator=g)[:DVOCAB].sort().values
        head.d2t.copy_(ids - torch.arange(DVOCAB))
        head.t2d.zero_()
        head.t2d[ids] = True
    return head.eval()


def _step(head, feats, tokens_emb, n_past=0, cache=None):
    """Run the head causally over N (feature, embedding) pairs from slot n_past."""
    n = feats.shape[0]
    cache = cache or head.new_cache(64)
    slot = torch.arange(n_past + n)
    attend = slot[None, :] <= torch.arange(n_past, n_past + n)[:, None]
    with torch.no_grad():
        out, normed = head(tokens_emb, head.project(feats), torch.arange(n_past, n_past + n), cache, attend)
    return out, normed, cache


def test_config_reads_published_keys():
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256, "draft_vocab_size": 32000,
        "num_hidden_layers": 1, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 2048,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        "some_future_key": 1,
    }
    c = Eagle3Config.from_dict(cfg)
    assert (c.head_dim, c.target_hidden_size, c.draft_vocab_size) == (128, 4096, 32000)
    assert c.feature_layers(32) == (2, 16, 29)  # EAGLE-3's default: inputs of layers 2, N//2, N-3
    assert c.rope_scaling is not None and c.rope_scaling.factor == 8.0
    assert not c.fc_norm and not c.norm_output
    nested = Eagle3Config.from_dict({**cfg, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 23, 44]}})
    assert nested.feature_layers(32) == (1, 23, 44)
    top = Eagle3Config.from_dict({**cfg, "eagle_aux_hidden_state_layer_ids": [3, 5, 7], "fc_norm": True, "norm_output": True})
    assert top.feature_layers(32) == (3, 5, 7) and top.fc_norm and top.norm_output
    assert c.draft_window is None and "draft_window" not in c.to_dict()  # published heads: full attention
    windowed = Eagle3Config.from_dict({**cfg, "draft_window": 1024})
    assert windowed.draft_window == 1024 and Eagle3Config.from_dict(windowed.to_dict()) == windowed
    for bad in (0, -5, 1.5, "1024", True):
        with pytest.raises(FormatError):
            Eagle3Config.from_dict({**cfg, "draft_window": bad})
    with pytest.raises(FormatError):
        Eagle3Config.from_dict({**cfg, "num_hidden_layers": 32})
    with pytest.raises(FormatError):
        Eagle3Config.from_dict({k: v for k, v in cfg.items() if k != "hidden_size"})


def test_state_dict_uses_published_names():
    head = _head(fc_norm=True)
    shapes = {k: tuple(v.shape) for k, v in head.state_dict().items()}
    assert shapes["fc.weight"] == (H, 3 * H)
    assert shapes["midlayer.self_attn.q_proj.weight"] == (HEADS * (H // HEADS), 2 * H)
    assert shapes["midlayer.self_attn.k_proj.weight"] == (KV * (H // HEADS), 2 * H)
    assert shapes["midlayer.self_attn.o_proj.weight"] == (H, H)
    assert shapes["lm_head.weight"] == (DVOCAB, H)
    assert shapes["d2t"] == (DVOCAB,) and shapes["t2d"] == (VOCAB,)
    for key in ("midlayer.hidden_norm.weight", "midlayer.input_layernorm.weight",
                "midlayer.post_attention_layernorm.weight", "norm.weight", "fc_norm.0.weight", "fc_norm.2.weight",
                "midlayer.mlp.gate_proj.weight", "midlayer.mlp.up_proj.weight", "midlayer.mlp.down_proj.weight"):
        assert key in shapes


def test_save_load_round_trip(tmp_path):
    head = _head(fc_norm=True, norm_output=True, aux_layer_ids=(1, 3, 4))
    save_head(head, tmp_path / "h")
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["config.json", "model.safetensors"]
    cfg = json.loads((tmp_path / "h" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["draft_vocab_size"] == DVOCAB
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
    loaded = load_head(tmp_path / "h", target_n_layer=6, target_hidden=H, target_vocab=VOCAB)
    assert loaded.config == head.config
    for k, v in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    feats, emb = torch.randn(5, 3 * H), torch.randn(5, H)
    assert torch.allclose(_step(head, feats, emb)[1], _step(loaded, feats, emb)[1])


def _published_checkpoint(directory, *, fmt="safetensors", with_t2d=True, prefix=""):
    """A checkpoint written key by key the way published EAGLE-3 heads are, not via save_head."""
    g = torch.Generator().manual_seed(5)
    hd = H // HEADS
    w = {
        "fc.weight": torch.randn(H, 3 * H, generator=g) * 0.1,
        "midlayer.self_attn.q_proj.weight": torch.randn(HEADS * hd, 2 * H, generator=g) * 0.1,
        "midlayer.self_attn.k_proj.weight": torch.randn(KV * hd, 2 * H, generator=g) * 0.1,
        "midlayer.self_attn.v_proj.weight": torch.randn(KV * hd, 2 * H, generator=g) * 0.1,
        "midlayer.self_attn.o_proj.weight": torch.randn(H, HEADS * hd, generator=g) * 0.1,
        "midlayer.mlp.gate_proj.weight": torch.randn(FF, H, generator=g) * 0.1,
        "midlayer.mlp.up_proj.weight": torch.randn(FF, H, generator=g) * 0.1,
        "midlayer.mlp.down_proj.weight": torch.randn(H, FF, generator=g) * 0.1,
        "midlayer.hidden_norm.weight": torch.ones(H),
        "midlayer.input_layernorm.weight": torch.ones(H),
        "midlayer.post_attention_layernorm.weight": torch.ones(H),
        "norm.weight": torch.ones(H),
        "lm_head.weight": torch.randn(DVOCAB, H, generator=g) * 0.1,
        "d2t": torch.arange(DVOCAB) * 2,  # draft id i -> target id 3i
        "embed_tokens.weight": torch.randn(VOCAB, H, generator=g),  # some checkpoints carry it
    }
    if with_t2d:
        t2d = torch.zeros(VOCAB, dtype=torch.bool)
        t2d[torch.arange(DVOCAB) * 3] = True
        w["t2d"] = t2d
    w = {prefix + k if k.startswith("midlayer") is False or not prefix else k.replace("midlayer.", prefix + "layers.0."): v
         for k, v in w.items()}
    directory.mkdir()
    config = {"hidden_size": H, "num_attention_heads": HEADS, "num_key_value_heads": KV, "intermediate_size": FF,
              "vocab_size": VOCAB, "draft_vocab_size": DVOCAB, "num_hidden_layers": 1, "rms_norm_eps": 1e-6,
              "rope_theta": 10000.0, "architectures": ["LlamaForCausalLMEagle3"]}
    (directory / "config.json").write_text(json.dumps(config))
    if fmt == "safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in w.items()}, str(directory / "model.safetensors"))
    else:
        torch.save(w, directory / "pytorch_model.bin")
    return w


@pytest.mark.parametrize("fmt,with_t2d,prefix", [("safetensors", True, ""), ("bin", False, ""), ("safetensors", True, "model.")])
def test_published_layout_loads(tmp_path, fmt, with_t2d, prefix):
    w = _published_checkpoint(tmp_path / "ckpt", fmt=fmt, with_t2d=with_t2d, prefix=prefix)
    head = load_head(tmp_path / "ckpt", target_n_layer=8, target_hidden=H, target_vocab=VOCAB)
    assert torch.equal(head.fc.weight, w[prefix + "fc.weight"])
    assert head.draft_to_target.tolist() == [3 * i for i in range(DVOCAB)]
    assert int(head.t2d.sum()) == DVOCAB and bool(head.t2d[3]) and not bool(head.t2d[1])
    assert head.config.feature_layers(8) == (2, 4, 5)
    assert head.embed_tokens is None  # same width as the target: the target's embeddings are used


def test_mismatched_target_is_named(tmp_path):
    _published_checkpoint(tmp_path / "ckpt")
    with pytest.raises(HomespecError, match=r"32-wide.*48"):
        load_head(tmp_path / "ckpt", target_n_layer=8, target_hidden=48, target_vocab=VOCAB)
    with pytest.raises(HomespecError, match=r"300 tokens.*1000"):
        load_head(tmp_path / "ckpt", target_n_layer=8, target_hidden=H, target_vocab=1000)
    cfg = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    cfg["eagle_aux_hidden_state_layer_ids"] = [2, 16, 29]  # a head for a 32-layer target
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HomespecError, match=r"\[2, 16, 29\].*8 layers"):
        load_head(tmp_path / "ckpt", target_n_layer=8, target_hidden=H, target_vocab=VOCAB)


def test_broken_checkpoints_raise_format_error(tmp_path):
    w = _published_checkpoint(tmp_path / "ckpt")
    from safetensors.torch import save_file

    del w["norm.weight"]
    save_file({k: v.contiguous() for k, v in w.items()}, str(tmp_path / "ckpt" / "model.safetensors"))
    with pytest.raises(FormatError, match="norm.weight"):
        load_head(tmp_path / "ckpt", target_n_layer=8, target_hidden=H, target_vocab=VOCAB)
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(FormatError):
        load_head(tmp_path / "ckpt", target_n_layer=8, target_hidden=H, target_vocab=VOCAB)
    with pytest.raises(FormatError):
        load_head(tmp_path / "missing", target_n_layer=8, target_hidden=H, target_vocab=VOCAB)


def test_fc_norm_normalises_each_feature():
    plain, normed = _head(seed=1), _head(seed=1, fc_norm=True)
    with torch.no_grad():
        for n in normed.fc_norm:
            n.weight.fill_(1.0)
    low, mid, high = torch.randn(3, 4, H).unbind(0)
    x = torch.cat([low, mid, high], -1)
    scaled = torch.cat([10 * low, mid, 0.1 * high], -1)  # one layer's features far louder than another's
    with torch.no_grad():
        # EAGLE-3.1: each feature is RMS-normalised before fc, so its scale no longer matters
        assert torch.allclose(normed.project(x), normed.project(scaled), atol=1e-3)
        assert not torch.allclose(plain.project(x), plain.project(scaled), atol=1e-2)
        assert not torch.allclose(plain.project(x), normed.project(x), atol=1e-3)


def test_norm_output_feeds_normed_state_forward():
    raw, normed = _head(seed=2), _head(seed=2, norm_output=True)
    feats, emb = torch.randn(4, 3 * H), torch.randn(4, H)
    out_r, nrm_r, _ = _step(raw, feats, emb)
    out_n, nrm_n, _ = _step(normed, feats, emb)
    assert torch.allclose(out_r, out_n) and torch.allclose(nrm_r, nrm_n)  # one step: identical
    assert torch.equal(raw.next_hidden(out_r, nrm_r), out_r)
    assert torch.equal(normed.next_hidden(out_n, nrm_n), nrm_n)
    # the second draft step differs because it consumes a different state
    with torch.no_grad():
        nxt_r = raw(emb[:1], raw.next_hidden(out_r, nrm_r)[-1:], torch.tensor([4]), _step(raw, feats, emb)[2],
                    torch.ones(1, 5, dtype=torch.bool))[1]
        nxt_n = normed(emb[:1], normed.next_hidden(out_n, nrm_n)[-1:], torch.tensor([4]), _step(normed, feats, emb)[2],
                       torch.ones(1, 5, dtype=torch.bool))[1]
    assert not torch.allclose(nxt_r, nxt_n, atol=1e-3)


def test_tree_level_in_one_forward_equals_separate_chains():
    """Three sibling branches evaluated in one forward with tree attention == one at a time."""
    head = _head(seed=3)
    feats, emb = torch.randn(6, 3 * H), torch.randn(6, H)
    _, _, cache = _step(head, feats, emb)  # 6 committed entries
    hid = torch.randn(3, H)
    kids = torch.randn(3, H)
    # level 1: the three siblings at position 6; each sees the 6 committed slots and itself
    attend = torch.zeros(3, 9, dtype=torch.bool)
    attend[:, :6] = True
    attend[torch.arange(3), 6 + torch.arange(3)] = True
    with torch.no_grad():
        batched = head(kids, hid, torch.full((3,), 6), cache, attend)[1]
        # level 2 under sibling 1: sees committed + slot 7 (its parent) + itself
        attend2 = torch.zeros(1, 10, dtype=torch.bool)
        attend2[0, :6] = True
        attend2[0, [7, 9]] = True
        deep_batched = head(kids[:1], hid[:1], torch.tensor([7]), cache, attend2)[1]
    for i in range(3):
        _, _, solo = _step(head, feats, emb)
        with torch.no_grad():
            one = head(kids[i : i + 1], hid[i : i + 1], torch.tensor([6]), solo, torch.ones(1, 7, dtype=torch.bool))[1]
            assert torch.allclose(one, batched[i : i + 1], atol=1e-5)
            if i == 1:
                deep = head(kids[:1], hid[:1], torch.tensor([7]), solo, torch.ones(1, 8, dtype=torch.bool))[1]
                assert torch.allclose(deep, deep_batched, atol=1e-5)


def test_cache_full_is_a_clear_error():
    head = _head()
    cache = head.new_cache(4)
    with pytest.raises(HomespecError, match="full"):
        _step(head, torch.randn(5, 3 * H), torch.randn(5, H), cache=cache)


def test_rope_scaling_changes_positions_only_far_out():
    from homespec.nets.config import RopeScaling

    scaled = _head(seed=4, rope_scaling=RopeScaling(8.0, 1.0, 4.0, 64), rope_theta=10000.0)
    plain = _head(seed=4)
    feats, emb = torch.randn(3, 3 * H), torch.randn(3, H)
    # Different rotary frequencies give different attention over several positions.
    assert not torch.allclose(_step(scaled, feats, emb)[1], _step(plain, feats, emb)[1], atol=1e-6)
    assert dataclasses.replace(plain.config, rope_scaling=None) == plain.config

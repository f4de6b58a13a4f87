"""The torch Llama-family model: numerics against transformers, GGUF loading (q/k permutation),
tree attention, compaction, rollback, feature capture."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from homespec.contracts.tree import ancestor_mask, depths, path_to
from homespec.errors import HomespecError
from homespec.nets.config import RopeScaling, read_gguf_config, read_hf_config
from homespec.nets.load import load_model, unpermute_qk
from tiny_models import make_tiny_gguf, make_tiny_hf_dir, permute_qk

SMALL_VOCAB = 512  # numerics tests need no real tokenizer; a small vocabulary keeps them fast
LLAMA3 = RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64)


def _transformers_logits(directory, tokens: list[int], hidden_layers=()):
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(directory), dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        out = model(torch.tensor([tokens]), output_hidden_states=True)
    return out.logits[0], [out.hidden_states[i][0] for i in hidden_layers]


def _tokens(n: int, vocab: int, seed: int = 0) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


@pytest.mark.slow  # the first one imports transformers (~10 s)
@pytest.mark.parametrize(
    "kwargs",
    [
        dict(tied=True),
        dict(tied=False, n_head_kv=4),
        dict(rope_scaling=LLAMA3),  # positions up to 95 cross the 64-token original context
        dict(qkv_bias=True, tied=False),  # written as a Qwen2 config
    ],
    ids=["llama-tied-gqa", "llama-untied-mha", "llama3-rope-scaling", "qwen2-qkv-bias"],
)
def test_logits_match_transformers(tmp_path, kwargs):
    d = make_tiny_hf_dir(tmp_path / "m", n_vocab=SMALL_VOCAB, seed=3, **kwargs)
    tokens = _tokens(96, SMALL_VOCAB)
    model = load_model(str(d), device="cpu", max_context=128)
    ours = model.forward(torch.tensor(tokens)).logits  # [T, V]
    ref, _ = _transformers_logits(d, tokens)
    assert ours.shape == ref.shape
    assert (ours - ref).abs().max().item() < 1e-4
    assert ours.std().item() > 1.0  # the tiny model is not degenerate


def test_config_from_hf_reads_scaling_and_bias(tmp_path):
    cfg = read_hf_config(make_tiny_hf_dir(tmp_path / "q", n_vocab=SMALL_VOCAB, qkv_bias=True, rope_scaling=LLAMA3))
    assert cfg.arch == "qwen2" and cfg.qkv_bias and not cfg.o_bias
    assert cfg.rope_scaling == LLAMA3
    factors = cfg.rope_factors
    assert factors is not None and len(factors) == cfg.head_dim // 2
    assert factors[0] == 1.0 and factors[-1] == LLAMA3.factor  # fastest untouched, slowest divided


def test_captured_features_are_layer_inputs(tmp_path):
    d = make_tiny_hf_dir(tmp_path / "m", n_vocab=SMALL_VOCAB, n_layer=6, seed=1)
    tokens = _tokens(20, SMALL_VOCAB, seed=1)
    model = load_model(str(d), device="cpu", max_context=64)
    layers = model.cfg.default_feature_layers()
    assert layers == (2, 3, 3)
    capture = (2, 3, 5)
    out = model.forward(torch.tensor(tokens), capture=capture)
    _, hidden = _transformers_logits(d, tokens, hidden_layers=capture)
    h = model.cfg.n_embd
    assert out.features.shape == (20, 3 * h)
    for k, ref in enumerate(hidden):  # HF hidden_states[i] is the input of layer i
        assert (out.features[:, k * h:(k + 1) * h] - ref).abs().max().item() < 1e-4


@settings(max_examples=25, deadline=None)
@given(n_head=st.integers(1, 4), half=st.integers(1, 8), cols=st.integers(0, 3))
def test_unpermute_inverts_converter_permutation(n_head, half, cols):
    shape = (n_head * 2 * half,) + ((cols,) if cols else ())
    w = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    assert np.array_equal(unpermute_qk(permute_qk(w, n_head), n_head), w)


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    """The same random weights as a llama-arch GGUF (q/k permuted by the converter's rule) and an HF dir."""
    root = tmp_path_factory.mktemp("pair")
    kw = dict(seed=5, tied=False, rope_scaling=LLAMA3)
    return make_tiny_gguf(root / "m.gguf", **kw), make_tiny_hf_dir(root / "hf", tokenizer=False, **kw)


@pytest.mark.slow
def test_gguf_loads_to_the_same_model_as_hf(tiny_pair):
    gguf_path, hf_dir = tiny_pair
    cfg = read_gguf_config(gguf_path)
    # rope_freqs.weight (float32 in the file) == the llama3 formula from config.json
    assert np.allclose(cfg.rope_freq_factors, read_hf_config(hf_dir).rope_factors, rtol=1e-6)
    tokens = _tokens(90, cfg.n_vocab, seed=2)
    a = load_model(str(gguf_path), device="cpu", max_context=96).forward(torch.tensor(tokens)).logits
    b = load_model(str(hf_dir), device="cpu", max_context=96).forward(torch.tensor(tokens)).logits
    assert (a - b).abs().max().item() < 1e-5


def test_gguf_qwen2_is_not_permuted(tmp_path):
    kw = dict(seed=2, arch="qwen2", qkv_bias=True, tied=False)
    g = make_tiny_gguf(tmp_path / "q.gguf", **kw)
    hf = make_tiny_hf_dir(tmp_path / "q", tokenizer=False, **{k: v for k, v in kw.items() if k != "arch"})
    tokens = _tokens(40, 49152, seed=4)
    a = load_model(str(g), device="cpu", max_context=64).forward(torch.tensor(tokens)).logits
    b = load_model(str(hf), device="cpu", max_context=64).forward(torch.tensor(tokens)).logits
    assert (a - b).abs().max().item() < 1e-5


def test_f16_gguf_is_close_to_f32(tmp_path):
    f32 = load_model(str(make_tiny_gguf(tmp_path / "a.gguf", seed=7)), device="cpu", max_context=64)
    f16 = load_model(str(make_tiny_gguf(tmp_path / "b.gguf", seed=7, ftype="F16")), device="cpu", max_context=64)
    tokens = torch.tensor(_tokens(32, 49152, seed=7))
    a, b = f32.forward(tokens).logits, f16.forward(tokens).logits
    assert 0 < (a - b).abs().max().item() < 0.5  # rounded weights, same model
    assert (a.argmax(-1) == b.argmax(-1)).float().mean().item() > 0.9


# --- tree attention, compaction, rollback ---------------------------------------------------

TREE_TOKENS = [11, 40, 41, 50, 42, 43, 51, 60]
TREE_PARENTS = [-1, 0, 0, 1, 1, 2, 3, 3]  # branching at nodes 0, 1 and 3


@pytest.fixture(scope="module")
def small_model(tmp_path_factory):
    d = make_tiny_hf_dir(tmp_path_factory.mktemp("small") / "m", n_vocab=SMALL_VOCAB, seed=11)
    return load_model(str(d), device="cpu", max_context=64)


def test_tree_forward_equals_sequential_paths(small_model):
    m = small_model
    prefix = _tokens(13, SMALL_VOCAB, seed=3)
    m.reset()
    m.forward(torch.tensor(prefix))
    m.commit(len(prefix))
    n = m.n_past
    pos = n + torch.from_numpy(depths(TREE_PARENTS))
    tree = m.forward(torch.tensor(TREE_TOKENS), pos, torch.from_numpy(ancestor_mask(TREE_PARENTS)), capture=(1, 2))
    for i in range(len(TREE_TOKENS)):
        path = path_to(TREE_PARENTS, i)
        seq = m.forward(torch.tensor([TREE_TOKENS[j] for j in path]), capture=(1, 2))  # uncommitted: n_past unchanged
        assert (seq.logits[-1] - tree.logits[i]).abs().max().item() < 1e-4
        assert (seq.features[-1] - tree.features[i]).abs().max().item() < 1e-4


def test_commit_path_equals_feeding_it_sequentially(small_model):
    m = small_model
    prefix = _tokens(9, SMALL_VOCAB, seed=4)
    path = [0, 1, 4]  # root -> 40 -> 42: skips node 3, which sits between them in the slots
    nxt = torch.tensor([77, 78])
    m.reset()
    m.forward(torch.tensor(prefix))
    m.commit(len(prefix))
    n = m.n_past
    m.forward(torch.tensor(TREE_TOKENS), n + torch.from_numpy(depths(TREE_PARENTS)), torch.from_numpy(ancestor_mask(TREE_PARENTS)))
    m.commit_path(path)
    after_tree = m.forward(nxt).logits

    m.reset()
    m.forward(torch.tensor(prefix + [TREE_TOKENS[j] for j in path]))
    m.commit(len(prefix) + len(path))
    sequential = m.forward(nxt).logits
    assert m.n_past == len(prefix) + len(path)
    assert (after_tree - sequential).abs().max().item() < 1e-4


def test_rollback_restores_exact_logits(small_model):
    m = small_model
    m.reset()
    tokens = _tokens(20, SMALL_VOCAB, seed=5)
    m.forward(torch.tensor(tokens[:12]))
    m.commit(12)
    before = m.forward(torch.tensor(tokens[12:14])).logits
    m.forward(torch.tensor(tokens[12:20]))
    m.commit(8)
    m.rollback(8)
    assert m.n_past == 12
    assert torch.equal(m.forward(torch.tensor(tokens[12:14])).logits, before)
    with pytest.raises(HomespecError):
        m.rollback(13)


def test_context_exhaustion_raises(small_model):
    m = small_model
    m.reset()
    m.forward(torch.tensor(_tokens(60, SMALL_VOCAB)))
    m.commit(60)
    m.forward(torch.tensor([1, 2, 3, 4]))  # exactly fills the 64 slots
    with pytest.raises(HomespecError) as err:
        m.forward(torch.tensor([1, 2, 3, 4, 5]))
    assert "context" in err.value.message and err.value.hint

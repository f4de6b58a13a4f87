"""The torch backend on a CUDA GPU: the same answers as on the CPU, tree commits that continue
like plain decoding, and greedy EAGLE-3 generation identical to plain greedy decoding (a tiny
random model with a random head; and the embedded SmolLM2 with the shipped head when the
embedded model is installed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tiny_models import make_tiny_hf_dir, write_word_tokenizer  # noqa: E402

from homespec.errors import HomespecError  # noqa: E402
from homespec.engine.run import decode  # noqa: E402
from homespec.speculative.steps import Limits

pytestmark = pytest.mark.gpu
VOCAB = 512


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    d = make_tiny_hf_dir(tmp_path_factory.mktemp("torch-gpu") / "m", n_vocab=VOCAB, n_layer=6, n_embd=128,
                         n_head=4, n_head_kv=2, n_ff=256, seed=11)
    write_word_tokenizer(d, VOCAB)  # the loop asks the backend for its tokenizer
    return d


@pytest.fixture(scope="module")
def cuda_backend(tiny_dir):
    from homespec.backends.torch.backend import TorchBackend

    be = TorchBackend.load(str(tiny_dir), device="cuda", max_context=256)
    yield be
    be.close()


def _prompt(n: int, seed: int) -> list[int]:
    return torch.randint(0, VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def _tokens(backend, drafter, prompt: list[int], n: int) -> list[int]:
    backend.reset()
    if drafter is not None:
        drafter.reset()
    steps = list(decode(backend, drafter, prompt, limits=Limits(max_tokens=n, stop_at_eos=False)))
    return [t for s in steps for t in s.tokens][:n]


def test_auto_kernels_use_a_gpu_kernel():
    from homespec import kernels

    chosen = kernels.selected("cuda")
    reasons = {k.impl: k.reason for k in kernels.available()}
    assert chosen in ("triton", "cuda"), f"CUDA tensors fall back to the torch reference: {reasons}"


def test_cuda_logits_match_cpu(tiny_dir, cuda_backend):
    from homespec.backends.torch.backend import TorchBackend

    cpu = TorchBackend.load(str(tiny_dir), device="cpu", max_context=256)
    prompt = _prompt(17, 1)
    tokens, parents = [5, 6, 7, 8, 9], [-1, 0, 0, 1, 3]
    outs = []
    for be in (cpu, cuda_backend):
        be.reset()
        pre = be.prefill(prompt)
        tree = be.verify(tokens, parents)
        outs.append((pre.logits, tree.logits))  # numpy on the host, from either device
    cpu.close()
    assert cuda_backend.device.startswith("cuda")
    for a, b in zip(*outs):
        assert np.abs(a - b).max() < 1e-3
        assert np.array_equal(a.argmax(-1), b.argmax(-1))


def test_tree_commit_on_cuda_continues_like_sequential(cuda_backend):
    be = cuda_backend
    be.set_feature_layers((2, 3, 3))
    prompt = _prompt(11, 5)
    be.reset()
    be.prefill(prompt)
    be.verify([9, 30, 31, 40, 41, 50], [-1, 0, 0, 1, 2, 3])
    be.commit([0, 1, 3, 5])  # 9 -> 30 -> 40 -> 50: not a prefix, so KV rows move (homespec.kernels.compact_kv)
    after = be.verify([77], [-1])
    be.reset()
    be.prefill(prompt + [9, 30, 40, 50])
    ref = be.verify([77], [-1])
    assert np.abs(after.logits - ref.logits).max() < 1e-3
    assert np.abs(after.features - ref.features).max() < 1e-3
    be.set_feature_layers(())


def _random_head(backend, seed: int):
    from homespec.nets.eagle3 import Eagle3Config, Eagle3Head

    torch.manual_seed(seed)
    cfg = Eagle3Config(hidden_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                       intermediate_size=256, vocab_size=VOCAB, draft_vocab_size=VOCAB, target_hidden_size=128,
                       fc_norm=True, norm_output=True)
    head = Eagle3Head(cfg)
    with torch.no_grad():  # read-out = the target's embeddings: drafts are sometimes right
        head.lm_head.weight.copy_(backend.embed(torch.arange(VOCAB)).float().cpu())
    return head.to(backend.device).eval()


def test_greedy_eagle3_equals_plain_greedy_on_cuda(cuda_backend):
    from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter

    be = cuda_backend
    head = _random_head(be, 0)
    drafters = {"chain": Eagle3Drafter(head, be, depth=4, topk=1, total=5),
                "tree": Eagle3Drafter(head, be, depth=4, topk=4, total=16)}
    for seed in range(3):
        prompt = _prompt(9 + seed, 20 + seed)
        plain = _tokens(be, None, prompt, 40)
        for name, d in drafters.items():
            assert _tokens(be, d, prompt, 40) == plain, (name, seed)


@pytest.fixture(scope="module")
def smollm2_cuda():
    from homespec.backends.torch.backend import TorchBackend
    from homespec.embedded import smollm2_path

    try:
        path = smollm2_path()
    except HomespecError as e:
        pytest.skip(e.message)
    be = TorchBackend.load(str(path), device="cuda", max_context=1024)
    yield be
    be.close()


@pytest.mark.slow
def test_shipped_head_greedy_equals_plain_on_smollm2_cuda(smollm2_cuda):
    from homespec.nets.eagle3 import load_head
    from homespec.embedded import DEFAULT_HEAD
    from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter

    be = smollm2_cuda
    tok = be.tokenizer
    head = load_head(DEFAULT_HEAD, be.n_layer, be.hidden_size, be.n_vocab, device=be.device)
    drafter = Eagle3Drafter(head, be, depth=6, topk=8, total=48, window=head.config.draft_window)
    emitted = passes = 0
    for text in ("Explain in two sentences why leaves change colour in autumn.",
                 "Write a Python function that returns the n-th Fibonacci number."):
        prompt = tok.encode(tok.chat_prompt([{"role": "user", "content": text}]), add_bos=False, special=True)
        plain = _tokens(be, None, prompt, 64)
        be.reset()
        drafter.reset()
        steps = list(decode(be, drafter, prompt, limits=Limits(max_tokens=64, stop_at_eos=False)))
        assert [t for s in steps for t in s.tokens][:64] == plain
        spec = [s for s in steps[1:] if s.speculative and s.draft_size > 0]
        emitted += sum(len(s.tokens) for s in spec)
        passes += len(spec)
    assert passes and emitted / passes > 1.5  # the shipped head drafts usefully on CUDA too (CPU: 3.2)

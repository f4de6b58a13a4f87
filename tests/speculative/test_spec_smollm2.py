"""Greedy speculation equals greedy plain decoding on the real SmolLM2 file (torch backend, fp32),
for every drafter, over several prompts and lengths."""

from __future__ import annotations

import pytest
import torch

from homespec.engine.run import decode

from homespec.speculative.steps import Limits

pytestmark = pytest.mark.slow

PROMPTS = [
    "Explain in two sentences why leaves change colour in autumn.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List four things to pack for a weekend hiking trip.",
]


@pytest.fixture(scope="module")
def smol(smollm2_path):
    from homespec.backends.torch.backend import TorchBackend

    torch.set_num_threads(1)
    backend = TorchBackend.load(str(smollm2_path), max_context=512)
    yield backend
    backend.close()


def _chat_ids(backend, text):
    tok = backend.tokenizer
    return tok.encode(tok.chat_prompt([{"role": "user", "content": text}]), add_bos=False, special=True)


def _run(backend, drafter, prompt, n):
    backend.reset()
    if drafter is not None:
        drafter.reset()
    return [t for s in decode(backend, drafter, prompt, limits=Limits(max_tokens=n)) for t in s.tokens]


def _random_head(backend, seed=0):
    from homespec.nets.eagle3 import Eagle3Config, Eagle3Head

    torch.manual_seed(seed)
    cfg = Eagle3Config(hidden_size=576, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                       intermediate_size=1536, vocab_size=backend.n_vocab, draft_vocab_size=4096,
                       target_hidden_size=576, rope_theta=100000.0, fc_norm=True, norm_output=True)
    head = Eagle3Head(cfg)
    with torch.no_grad():  # an informative head: its lm_head copies the target's embeddings of the
        head.lm_head.weight.copy_(backend.embed(torch.arange(4096)))  # 4096 most common ids (d2t = 0)
    return head


def test_every_drafter_matches_plain_greedy_on_smollm2(smol):
    from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter
    from homespec.speculative.drafters.ngram import NgramDrafter

    head = _random_head(smol)
    drafters = {
        "ngram": NgramDrafter(max_ngram=3, num_draft=4),
        "eagle3-chain": Eagle3Drafter(head, smol, depth=3, topk=1, total=4),
        "eagle3-tree": Eagle3Drafter(head, smol, depth=3, topk=3, total=8),
    }
    for i, text in enumerate(PROMPTS):
        prompt = _chat_ids(smol, text)
        n = (12, 20, 28)[i]
        plain = _run(smol, None, prompt, n)
        for name, d in drafters.items():
            assert _run(smol, d, prompt, n) == plain, name


def test_a_draft_model_identical_to_the_target_is_always_accepted(smol, smollm2_path):
    from homespec.backends.torch.backend import TorchBackend
    from homespec.speculative.drafters.draft_model import DraftModelDrafter

    draft = TorchBackend.load(str(smollm2_path), max_context=512)
    try:
        drafter = DraftModelDrafter(draft, depth=3)
        prompt = _chat_ids(smol, PROMPTS[0])
        plain = _run(smol, None, prompt, 16)
        smol.reset()
        steps = list(decode(smol, drafter, prompt, limits=Limits(max_tokens=16)))
        assert [t for s in steps for t in s.tokens] == plain
        full = [s for s in steps[1:] if s.draft_size == 3 and not s.finish]
        assert full and all(s.accepted == 3 for s in full)
    finally:
        draft.close()

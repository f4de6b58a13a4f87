"""EXL2 backend on a CUDA GPU: a tiny random Llama converted with exllamav2's own converter, then
(1) a tree verify + non-prefix commit continues exactly like plain decoding, and (2) greedy
EAGLE-3 generation emits exactly exllamav2's own plain greedy tokens; tokens/s are printed
(run with -s to see them)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from tiny_models import make_tiny_hf_dir  # noqa: E402

from homespec.errors import HomespecError  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
PROMPT = [1, 504, 3458, 282, 260, 1345, 30, 2030, 314, 281, 4433, 30]


@pytest.fixture(scope="module")
def exl2_model(tmp_path_factory) -> Path:
    from homespec.backends.exl2.load import import_exllamav2

    try:
        import_exllamav2()
    except HomespecError as e:
        pytest.skip(e.message)
    root = tmp_path_factory.mktemp("exl2")
    hf = make_tiny_hf_dir(root / "hf", n_layer=6, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, seed=3)
    out = root / "exl2"
    proc = subprocess.run([sys.executable, "-m", "exllamav2.conversion.convert_exl2", "-i", str(hf), "-o",
                           str(root / "work"), "-cf", str(out), "-b", "6.0", "-hb", "8"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _plain_greedy(model_dir: Path, prompt: list[int], n: int) -> tuple[list[int], float]:
    """exllamav2's own greedy decoding: its forward and cache, one token per step."""
    from exllamav2 import ExLlamaV2, ExLlamaV2Cache, ExLlamaV2Config

    cfg = ExLlamaV2Config(str(model_dir))
    cfg.max_seq_len = 1024
    model = ExLlamaV2(cfg)
    cache = ExLlamaV2Cache(model, max_seq_len=1024, lazy=True)
    model.load_autosplit(cache)
    ids = torch.tensor([prompt])
    out: list[int] = []
    t0 = time.perf_counter()
    logits = model.forward(ids, cache, last_id_only=True)  # [1, 1, V]
    for _ in range(n):
        tok = int(logits[0, -1].argmax())
        out.append(tok)
        logits = model.forward(torch.tensor([[tok]]), cache)
    dt = time.perf_counter() - t0
    model.unload()
    return out, n / dt


def test_tree_commit_continues_like_plain_decoding(exl2_model):
    from homespec.backends.exl2.backend import Exl2Backend

    for kv in ("f16", "q8", "q4"):
        be = Exl2Backend.load(str(exl2_model), max_context=512, kv_type=kv)
        be.prefill(PROMPT[:-1])
        a = int(be.verify([PROMPT[-1]], [-1]).logits[0].argmax())
        be.commit([0])
        b = int(be.verify([a], [-1]).logits[0].argmax())
        be.commit([0])
        c = int(be.verify([b], [-1]).logits[0].argmax())  # plain: a, b, c after the prompt
        be.rollback(2)
        # root = a; a wrong child first, then the right chain b under a second child: the accepted
        # path [0, 2, 3] is not a prefix, so commit must move rows (or re-evaluate on q4 blocks)
        wrong = (b + 1) % be.n_vocab
        fwd = be.verify([a, wrong, b, c], [-1, 0, 0, 2])
        assert int(fwd.logits[0].argmax()) == b and int(fwd.logits[2].argmax()) == c
        be.commit([0, 2, 3])
        nxt_tree = be.verify([int(fwd.logits[3].argmax())], [-1]).logits[0]
        be.rollback(3)
        be.verify([a], [-1])
        be.commit([0])
        be.verify([b], [-1])
        be.commit([0])
        be.verify([c], [-1])
        be.commit([0])
        nxt_plain = be.verify([int(fwd.logits[3].argmax())], [-1]).logits[0]
        err = float(np.abs(nxt_tree - nxt_plain).max())
        print(f"kv {kv}: logits after tree commit vs plain: max abs diff {err:.3g}; recomputed {be.recomputed_commits}")
        assert int(nxt_tree.argmax()) == int(nxt_plain.argmax())
        report = be.memory_report()
        assert report.kv_bytes > 0 and report.weights_bytes > 0
        be.close()


def test_contract_violations_raise_the_same_types_as_every_backend(exl2_model):
    from backend_contract import check_contract_errors

    from homespec.backends.exl2.backend import Exl2Backend

    be = Exl2Backend.load(str(exl2_model), max_context=512)
    try:
        check_contract_errors(be, PROMPT)
    finally:
        be.close()


def test_greedy_eagle3_equals_exllamav2_plain_greedy(exl2_model):
    from homespec.backends.exl2.backend import Exl2Backend
    from homespec.nets.eagle3 import Eagle3Config, Eagle3Head
    from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter
    from homespec.engine.run import decode
    from homespec.speculative.steps import Limits

    n = 48
    plain, plain_tps = _plain_greedy(exl2_model, PROMPT, n)
    be = Exl2Backend.load(str(exl2_model), max_context=1024)
    torch.manual_seed(0)
    cfg = Eagle3Config(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                       intermediate_size=512, vocab_size=be.n_vocab, draft_vocab_size=be.n_vocab, target_hidden_size=256)
    head = Eagle3Head(cfg).to(device=be.device, dtype=torch.float16).eval()  # untrained: exercises the path, not speed
    runs = {}
    for method in ("none", "eagle3"):
        be.reset()
        drafter = Eagle3Drafter(head, be, depth=4, topk=4, total=16) if method == "eagle3" else None
        t0 = time.perf_counter()
        steps = list(decode(be, drafter, PROMPT, limits=Limits(max_tokens=n, stop_at_eos=False)))
        dt = time.perf_counter() - t0
        runs[method] = ([t for s in steps for t in s.tokens][:n], n / dt)
    print(f"exllamav2 plain {plain_tps:.1f} tok/s; homespec none {runs['none'][1]:.1f} tok/s, eagle3 {runs['eagle3'][1]:.1f} tok/s")
    assert runs["none"][0] == plain
    assert runs["eagle3"][0] == plain
    be.close()

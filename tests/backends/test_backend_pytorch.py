"""TorchBackend: the Backend protocol on the reference model, and agreement with llama.cpp."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from homespec.backends.torch.backend import TorchBackend
from homespec.contracts.backend import Backend
from homespec.errors import HomespecError
from homespec.nets.config import RopeScaling
from homespec.plan.lines import LineKind
from tiny_models import make_tiny_gguf, make_tiny_hf_dir

SMALL_VOCAB = 512


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    d = make_tiny_hf_dir(tmp_path_factory.mktemp("b") / "m", n_vocab=SMALL_VOCAB, n_layer=6, seed=21)
    return TorchBackend.load(str(d), device="cpu", max_context=96)


def _prompt(n: int, seed: int) -> list[int]:
    return torch.randint(0, SMALL_VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.slow
def test_is_a_backend(tmp_path):
    # a model directory with a tokenizer: Python 3.11's isinstance() reads every protocol member
    d = make_tiny_hf_dir(tmp_path / "m", n_layer=2, seed=4)
    b = TorchBackend.load(str(d), device="cpu", max_context=32)
    assert isinstance(b, Backend)
    assert (b.n_layer, b.hidden_size, b.n_vocab, b.max_context) == (2, 64, 49152, 32)
    assert b.supports_tree and b.name == "torch" and b.device == "cpu" and b.model_path == str(d)
    assert b.tokenizer.encode("<|im_end|>", special=True) == [2]
    emb = b.embed(torch.tensor([[3, 4]]))
    assert emb.shape == (1, 2, 64) and torch.equal(emb[0, 1], b.model.embed[4])
    b.close()


def _greedy_incremental(backend, prompt, n):
    backend.reset()
    fwd = backend.prefill(prompt)
    assert fwd.logits.shape == (1, SMALL_VOCAB)
    out = []
    for _ in range(n):
        tok = int(fwd.logits[-1].argmax())
        out.append(tok)
        fwd = backend.verify([tok], [-1])  # the root alone: a one-token step
        backend.commit([0])
    assert backend.n_past == len(prompt) + n
    return out


def _greedy_full_recompute(model, prompt, n):
    seq, out = list(prompt), []
    for _ in range(n):  # recompute everything from scratch each step
        model.reset()
        tok = int(model.forward(torch.tensor(seq)).logits[-1].argmax())
        out.append(tok)
        seq.append(tok)
    return out


@pytest.mark.slow
def test_greedy_with_verify_equals_full_recompute(backend):
    outputs = []
    for seed in range(3):
        prompt = _prompt(7, seed)
        fast = _greedy_incremental(backend, prompt, 16)
        assert fast == _greedy_full_recompute(backend.model, prompt, 16)
        outputs.append(tuple(fast))
    assert len(set(outputs)) == 3  # greedy output depends on the prompt


def test_tree_verify_commit_equals_sequential(backend):
    backend.set_feature_layers((2, 3, 3))
    prompt = _prompt(11, 5)
    tokens = [9, 30, 31, 40, 41, 50]
    parents = [-1, 0, 0, 1, 2, 3]
    backend.reset()
    pre = backend.prefill(prompt)
    assert pre.features.shape == (11, 3 * 64)
    tree = backend.verify(tokens, parents)
    assert tree.logits.shape == (6, SMALL_VOCAB) and tree.features.shape == (6, 3 * 64)
    backend.commit([0, 1, 3, 5])  # 9 -> 30 -> 40 -> 50
    after = backend.verify([77], [-1])

    backend.reset()
    seq = backend.prefill(prompt + [9, 30, 40, 50])
    ref = backend.verify([77], [-1])
    # node 5 (token 50) of the tree saw exactly the sequence prompt + 9, 30, 40, 50
    assert np.abs(tree.logits[5] - seq.logits[-1]).max() < 1e-4
    assert np.abs(after.logits - ref.logits).max() < 1e-4
    assert np.abs(after.features - ref.features).max() < 1e-4
    backend.set_feature_layers(())


def test_rollback_and_reset(backend):
    backend.reset()
    backend.prefill(_prompt(10, 6))
    first = backend.verify([5], [-1])
    backend.commit([0])
    backend.prefill(_prompt(4, 7))
    backend.rollback(5)
    assert backend.n_past == 10
    assert np.array_equal(backend.verify([5], [-1]).logits, first.logits)


def test_commit_checks_path(backend):
    backend.reset()
    backend.prefill(_prompt(5, 8))
    with pytest.raises(HomespecError):
        backend.commit([0])  # nothing verified yet
    backend.verify([1, 2, 3], [-1, 0, 0])
    with pytest.raises(HomespecError):
        backend.commit([0, 2, 1])  # 1 is not a child of 2
    with pytest.raises(HomespecError):
        backend.commit([1])  # must start at the root
    backend.commit([0, 2])
    assert backend.n_past == 7
    with pytest.raises(HomespecError):
        backend.set_feature_layers([7])


def test_verify_refuses_a_malformed_tree(backend):
    from homespec.errors import TreeError

    # the tree mask comes from homespec.kernels, whose GPU kernels trust the parents: the
    # backend checks them first (contracts/tree.py's rule)
    backend.reset()
    backend.prefill(_prompt(5, 8))
    for parents in ([-1, 1, 0], [0, 0], [-1, 0, 3]):
        with pytest.raises(TreeError, match="parent"):
            backend.verify([1, 2, 3][: len(parents)], parents)
    assert backend.n_past == 5
def test_contract_violations_raise_the_same_types_as_every_backend(backend):
    from backend_contract import check_contract_errors

    check_contract_errors(backend, _prompt(8, 11))


def test_context_exhaustion(backend):
    backend.reset()
    backend.prefill(_prompt(90, 9))
    backend.verify(list(range(6)), [-1, 0, 1, 2, 3, 4])  # fills slots 90..95: still fits
    with pytest.raises(HomespecError) as err:
        backend.verify(list(range(7)), [-1, 0, 1, 2, 3, 4, 5])
    assert err.value.hint
    with pytest.raises(HomespecError):
        backend.prefill(_prompt(7, 1))
    assert backend.n_past == 90


def test_memory_report(backend):
    rep = backend.memory_report()
    cfg = backend.model.cfg
    assert rep.kv_bytes == 2 * cfg.n_layer * 96 * cfg.n_head_kv * cfg.head_dim * 4
    n_params = cfg.n_vocab * cfg.n_embd + cfg.n_embd + cfg.n_layer * (
        2 * cfg.n_embd + cfg.n_embd * cfg.head_dim * (2 * cfg.n_head + 2 * cfg.n_head_kv) + 3 * cfg.n_embd * cfg.n_ff
    )  # tied: the embedding counted once
    assert rep.weights_bytes == 4 * n_params
    assert rep.compute_bytes >= rep.detail["logits"] > 0
    assert rep.total_bytes == rep.weights_bytes + rep.kv_bytes + rep.compute_bytes


# --- against llama.cpp ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [dict(), dict(tied=False, rope_scaling=RopeScaling(8.0, 1.0, 4.0, 64)), dict(arch="qwen2", qkv_bias=True)],
    ids=["llama", "llama3-rope-freqs", "qwen2"],
)
def test_tiny_f32_gguf_matches_llama_cpp(tmp_path, kwargs):
    """Same file, two engines: agreement to ~1e-4 proves the q/k un-permutation and the RoPE variant."""
    llama_cpp = pytest.importorskip("llama_cpp")
    path = make_tiny_gguf(tmp_path / "m.gguf", seed=1, **kwargs)
    ids = torch.randint(0, 49152, (150,), generator=torch.Generator().manual_seed(0)).tolist()
    ours = TorchBackend.load(str(path), device="cpu", max_context=256).model.forward(torch.tensor(ids)).logits
    # F32 KV cache (ggml type 0) so the only differences left are float rounding
    llm = llama_cpp.Llama(str(path), n_ctx=256, n_batch=256, logits_all=True, verbose=False, n_threads=2,
                          type_k=0, type_v=0)
    llm.eval(ids)
    ref = torch.from_numpy(np.array(llm.scores[: len(ids)]))
    llm.close()
    assert (ours - ref).abs().max().item() < 5e-4
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


def test_quantised_tiny_gguf_loads(tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp")
    path = make_tiny_gguf(tmp_path / "q.gguf", seed=3, ftype="Q8_0")
    b = TorchBackend.load(str(path), device="cpu", max_context=128)
    ids = torch.randint(0, 49152, (64,), generator=torch.Generator().manual_seed(1)).tolist()
    ours = b.model.forward(torch.tensor(ids)).logits
    llm = llama_cpp.Llama(str(path), n_ctx=128, n_batch=128, logits_all=True, verbose=False, n_threads=2)
    llm.eval(ids)
    ref = torch.from_numpy(np.array(llm.scores[: len(ids)]))
    llm.close()
    assert (ours.argmax(-1) == ref.argmax(-1)).float().mean().item() >= 0.9


SMOLLM2_TEXTS = [
    "The Industrial Revolution began in Great Britain in the late eighteenth century, when new machines for "
    "spinning and weaving cotton were powered first by water and then by steam. Within a few decades factories, "
    "canals and railways had changed where people lived and how they worked.",
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n"
    "print([fibonacci(i) for i in range(10)])\n",
    None,  # a chat turn, rendered with the model's template
    "Photosynthesis converts light energy into chemical energy: plants take in carbon dioxide and water and, "
    "using sunlight, produce glucose and release oxygen. The process happens in the chloroplasts of leaf cells.",
    "Recipe: mix 200 g of flour, 2 eggs and 300 ml of milk into a smooth batter. Heat a pan, pour a thin layer "
    "and cook each pancake for about one minute per side.",
    "Dear team, the quarterly report is attached. Revenue grew 12% to $4.3 million, while costs fell slightly; "
    "please send comments by Friday so we can finalise the slides for Monday's meeting.",
]


@pytest.mark.slow
def test_smollm2_top1_agrees_with_llama_cpp(smollm2_path):
    """The real Q4_1 file: dequantised fp32 here vs llama.cpp's quantised kernels (which also round
    activations to 8 bits and keep an f16 KV cache), so only near-ties may disagree."""
    llama_cpp = pytest.importorskip("llama_cpp")
    b = TorchBackend.load(str(smollm2_path), device="cpu", max_context=512)
    tok = b.tokenizer
    llm = llama_cpp.Llama(str(smollm2_path), n_ctx=512, n_batch=512, logits_all=True, verbose=False, n_threads=2)
    agree = total = 0
    for text in SMOLLM2_TEXTS:
        if text is None:
            text = tok.chat_prompt([{"role": "user", "content": "What is the capital of France, and why is it famous?"}])
            text += "The capital of France is Paris. It is famous for the Eiffel Tower, the Louvre museum and its cafes."
        ids = tok.encode(text, special=True)
        b.model.reset()
        ours = b.model.forward(torch.tensor(ids)).logits
        llm.reset()
        llm.eval(ids)
        ref = torch.from_numpy(np.array(llm.scores[: len(ids)]))
        agree += int((ours.argmax(-1) == ref.argmax(-1)).sum())
        total += len(ids)
    llm.close()
    assert total >= 250
    assert agree / total >= 0.97, f"top-1 agreement {agree}/{total}"


# --- started from its plan (docs/architecture.md, contract 4) ------------------------------------


def test_settings_a_run_loads_the_backend_with_are_its_plans(tmp_path):
    """A torch run plans first (as `homespec plan --backend torch` would) and loads the backend with
    that plan's device, float type and context; the weights and KV it then holds are the plan's lines."""
    from homespec.backends.registry import settings_for
    from homespec.backends.settings import TorchSettings
    from homespec.session import RunOptions, Session

    path = make_tiny_gguf(tmp_path / "t.gguf", n_layer=2, tied=False)
    s = Session.open(RunOptions(model=str(path), method="none", backend="torch", device="cpu", ctx=256))
    try:
        assert s.plan is not None and s.plan.settings.backend == "torch" and not s.plan.machine.gpus
        assert s.backend.settings == settings_for(s.plan) == TorchSettings("cpu", "f32", 256)
        m = s.backend.model
        assert (str(m.device), m.dtype, m.max_context) == ("cpu", torch.float32, s.plan.settings.n_ctx)
        planned = {i.kind: i.bytes for i in s.plan.items}
        assert (m.weight_bytes(), m.kv_bytes()) == (planned[LineKind.WEIGHTS], planned[LineKind.TARGET_KV])
    finally:
        s.close()


@pytest.mark.parametrize("gpu,ram,device,dtype", [("none", 16, "cpu", "f32"), ("4090", 16, "cuda", "f16"),
                                                  ("m4-pro-24", None, "mps", "f16")])
def test_settings_follow_the_device_the_plan_chose(gpu, ram, device, dtype):
    """On a GPU the plan budgets 16-bit weights (plan.place.torch), and the backend is loaded so."""
    from homespec.backends.registry import settings_for
    from homespec.backends.settings import TorchSettings
    from homespec.plan.api import PlanRequest, make_plan

    plan = make_plan(PlanRequest(model=None, gpu=gpu, ram=ram, backend="torch", ctx=1024))
    assert settings_for(plan) == TorchSettings(device, dtype, 1024)
    weights = next(i for i in plan.items if i.kind == LineKind.WEIGHTS)
    assert weights.detail.endswith(f"x {4 if dtype == 'f32' else 2} B (dequantised)")
    assert settings_for(plan, device="cpu").dtype == "f32"  # an explicit device wins; the CPU runs fp32


def test_settings_from_another_backends_plan_are_refused():
    from homespec.backends.settings import torch_settings
    from homespec.plan.api import PlanRequest, make_plan

    with pytest.raises(HomespecError, match="llamacpp backend, not torch"):
        torch_settings(make_plan(PlanRequest(model=None, gpu="none", ram=16)))

"""Kernels against their torch references on random trees and caches (CPU), the references
against the numpy verifier the run path calls (homespec.speculative.verify), the torch backend's
generate loop through them, and a wheel that carries them.

Triton runs under TRITON_INTERPRET=1; the CUDA sources are compiled with nvcc (no driver needed
to compile); Metal runs only on macOS with MPS. GPU runs of the same comparisons live in
tests/gpu/test_kernels_gpu.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are first loaded

from homespec import kernels
from homespec.contracts.tree import DraftTree, ancestor_mask, path_to
from homespec.errors import UsageError
from homespec.kernels import reference as ref, select
from homespec.speculative.verify import greedy_path, sampled_path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = kernels.kernels_dir()
has_triton = not isinstance(select._load("triton"), select._Unavailable)
needs_triton = pytest.mark.skipif(not has_triton, reason="triton is not installed")


def random_tree(t: int, gen: torch.Generator, bushy: float = 0.5) -> torch.Tensor:
    """[T] parents: each node hangs off a random earlier node, or (chain-like) the previous one."""
    par = [-1]
    for i in range(1, t):
        chain = float(torch.rand((), generator=gen)) > bushy
        par.append(i - 1 if chain else int(torch.randint(0, i, (), generator=gen)))
    return torch.tensor(par, dtype=torch.int64)


def greedy_case(t: int, vocab: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A tree whose draft tokens agree with the target's argmax about 70% of the time."""
    gen = torch.Generator().manual_seed(seed)
    parents = random_tree(t, gen)
    target = torch.randint(0, vocab, (t,), generator=gen)
    tokens = torch.randint(0, vocab, (t,), generator=gen)
    agree = torch.rand(t, generator=gen) < 0.7
    tokens = torch.where(agree, target[parents.clamp_min(0)], tokens)
    return tokens, parents, target


def sampled_case(t: int, vocab: int, seed: int):
    """Children drawn from their parent's distribution, so acceptances happen (float64)."""
    gen = torch.Generator().manual_seed(seed)
    parents = random_tree(t, gen)
    probs = (8 * torch.randn(t, vocab, generator=gen, dtype=torch.float64)).softmax(-1)  # peaked, like an LM
    probs[:, vocab // 2:] *= torch.rand(t, 1, generator=gen, dtype=torch.float64) < 0.5  # some zero tails
    probs /= probs.sum(-1, keepdim=True)
    tokens = torch.zeros(t, dtype=torch.int64)
    for i in range(1, t):
        tokens[i] = torch.multinomial(probs[parents[i]], 1, generator=gen)[0]
    coins = torch.rand(t, generator=gen, dtype=torch.float64)
    u_final = float(torch.rand((), generator=gen, dtype=torch.float64))
    return tokens, parents, probs, coins, u_final


# --- the references themselves ------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_greedy_reference_is_the_deepest_matching_path(seed):
    # against the rule spelled out node by node: every root..i path, checked edge by edge
    tokens, parents, target = greedy_case(1 + seed * 3, 5, seed)
    tok, tgt = tokens.tolist(), target.tolist()
    matching = [path_to(parents, i) for i in range(len(tok))]
    matching = [p for p in matching if all(tok[b] == tgt[a] for a, b in zip(p, p[1:]))]
    best = max(matching, key=lambda p: (len(p), -p[-1]))  # deepest, then the lowest index
    choice = ref.verify_greedy_paths(tokens, parents, target)
    assert choice.to_verdict().path == best and choice.to_verdict().next_token == tgt[best[-1]]
    assert choice.path[len(best):].eq(-1).all()


@pytest.mark.parametrize("t,n_past", [(1, 0), (7, 3), (60, 100)])
def test_mask_reference_equals_tree_ancestor_mask(t, n_past):
    parents = random_tree(t, torch.Generator().manual_seed(t))
    mask = ref.tree_mask(parents, n_past)
    assert mask.shape == (t, n_past + t)
    assert bool(mask[:, :n_past].all())
    assert torch.equal(mask[:, n_past:], torch.from_numpy(ancestor_mask(parents)))


def test_compact_reference_moves_rows_like_a_loop():
    k = torch.randn(2, 3, 40, 8)
    v = torch.randn(2, 3, 40, 8)
    nodes = torch.tensor([0, 2, 3, 7, 9])
    want_k, want_v = k.clone(), v.clone()
    for i, j in enumerate(nodes.tolist()):  # sequential in node order is safe: nodes[i] >= i
        want_k[:, :, 10 + i] = want_k[:, :, 10 + j]
        want_v[:, :, 10 + i] = want_v[:, :, 10 + j]
    ref.compact_kv(k, v, 10, nodes)
    assert torch.equal(k, want_k) and torch.equal(v, want_v)


def test_sampled_reference_preserves_the_target_distribution():
    # root with three deterministic children (two of them the same token): the emitted first
    # token must still be distributed as p[0]
    p = torch.tensor([0.05, 0.4, 0.25, 0.2, 0.1, 0.0], dtype=torch.float64)
    probs = torch.stack([p] * 4)
    tokens = torch.tensor([0, 1, 1, 3])
    parents = torch.tensor([-1, 0, 0, 0])
    gen = torch.Generator().manual_seed(0)
    n = 3000
    counts = torch.zeros(6)
    for _ in range(n):
        coins = torch.rand(4, generator=gen, dtype=torch.float64)
        u = float(torch.rand((), generator=gen, dtype=torch.float64))
        choice = ref.verify_sampled_paths(tokens, parents, probs, coins, u).to_verdict()
        first = int(tokens[choice.path[1]]) if len(choice.path) > 1 else choice.next_token
        counts[first] += 1
    freq = counts / n
    assert float((freq - p.float()).abs().max()) < 0.03, freq  # 3000 draws: sd <= 0.009
    assert counts[5] == 0


# --- Triton (interpreted on the CPU) ------------------------------------------------------------


@needs_triton
@pytest.mark.parametrize("t", [1, 2, 9, 33, 64])
def test_triton_greedy_matches_reference(t):
    for seed in range(3):
        tokens, parents, target = greedy_case(t, 4, 100 * t + seed)
        a = ref.verify_greedy_paths(tokens, parents, target)
        b = kernels.verify_greedy_paths(tokens, parents, target, impl="triton")
        assert torch.equal(a.path, b.path) and int(a.length) == int(b.length) and int(a.next_token) == int(b.next_token)


@needs_triton
@pytest.mark.parametrize("t,vocab", [(1, 10), (6, 50), (20, 1500)])
def test_triton_sampled_matches_reference(t, vocab):
    accepted = 0
    for seed in range(4):
        case = sampled_case(t, vocab, 7 * t + seed)
        a = ref.verify_sampled_paths(*case)
        b = kernels.verify_sampled_paths(*case, impl="triton")
        assert a.to_verdict() == b.to_verdict()
        assert torch.equal(a.path, b.path)
        accepted += int(a.length) - 1
    assert t == 1 or accepted > 0  # the cases exercise acceptance, not only the residual draw


@needs_triton
@pytest.mark.parametrize("t,n_past", [(1, 0), (13, 5), (60, 1100)])
def test_triton_tree_mask_matches_reference(t, n_past):
    parents = random_tree(t, torch.Generator().manual_seed(n_past))
    assert torch.equal(kernels.tree_mask(parents, n_past, impl="triton"), ref.tree_mask(parents, n_past))


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_triton_compact_kv_matches_reference(dtype):
    gen = torch.Generator().manual_seed(3)
    k = torch.randn(3, 2, 64, 24, generator=gen).to(dtype)  # D = 24: a partial d-block
    v = torch.randn(3, 2, 64, 24, generator=gen).to(dtype)
    parents = random_tree(20, gen)
    leaf = 19
    path = [leaf]
    while parents[path[-1]] >= 0:
        path.append(int(parents[path[-1]]))
    nodes = torch.tensor(path[::-1])
    k1, v1, k2, v2 = k.clone(), v.clone(), k.clone(), v.clone()
    ref.compact_kv(k1, v1, 30, nodes)
    kernels.compact_kv(k2, v2, 30, nodes, impl="triton")
    err = (k1.float() - k2.float()).abs()
    print(f"compact_kv {dtype}: max err {err.max():.3g}, mean err {err.mean():.3g}")
    assert torch.equal(k1, k2) and torch.equal(v1, v2)


# --- dispatch -----------------------------------------------------------------------------------


def test_available_reports_every_implementation():
    status = {s.impl: s for s in kernels.available()}
    assert set(status) == set(kernels.IMPLS)
    assert status["torch"].usable
    if not torch.cuda.is_available():
        assert not status["cuda"].usable and "CUDA" in status["cuda"].reason


def test_auto_uses_the_reference_on_cpu_and_a_bad_choice_is_a_usage_error(monkeypatch):
    monkeypatch.delenv("HOMESPEC_KERNELS", raising=False)
    assert kernels.selected("cpu") == "torch"
    tokens, parents, target = greedy_case(10, 3, 1)
    assert kernels.verify_greedy_paths(tokens, parents, target).to_verdict() == \
        ref.verify_greedy_paths(tokens, parents, target).to_verdict()
    with pytest.raises(UsageError):
        kernels.verify_greedy_paths(tokens, parents, target, impl="vulkan")
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match="cuda kernels cannot run"):
            kernels.tree_mask(parents, 2, impl="cuda")


@pytest.mark.parametrize("seed", range(12))
def test_the_references_are_the_numpy_verifier(seed):
    """The kernels reproduce the verification the run path does in numpy on the host: the torch
    references give greedy_path's and sampled_path's verdicts on the same trees and draws."""
    tokens, parents, target = greedy_case(1 + 5 * seed, 4, seed)
    want = greedy_path(tokens.tolist(), parents.tolist(), target.tolist())
    assert ref.verify_greedy_paths(tokens, parents, target).to_verdict() == want
    tokens, parents, probs, coins, u_final = sampled_case(1 + 3 * seed, 40, seed)
    want = sampled_path(tokens.tolist(), parents.tolist(), probs.numpy(), coins.numpy(), u_final)
    assert ref.verify_sampled_paths(tokens, parents, probs, coins, u_final).to_verdict() == want


@needs_triton
def test_triton_sampled_kernel_is_the_numpy_verifier():
    # the same explicit draws: the kernel and the run path's verifier agree on them
    accepted = 0
    for seed in range(6):
        tokens, parents, probs, coins, u_final = sampled_case(24, 300, 40 + seed)
        want = sampled_path(tokens.tolist(), parents.tolist(), probs.numpy(), coins.numpy(), u_final)
        assert kernels.verify_sampled_paths(tokens, parents, probs, coins, u_final, impl="triton").to_verdict() == want
        accepted += len(want.path) - 1
    assert accepted > 0


class _SecondChildOracle:
    """Drafts three levels of the known greedy answer, the right token always the second of two
    children: every accepted path skips slots, so the KV rows of each commit move."""

    name = "oracle"

    def __init__(self, answer: list[int], prompt_len: int, vocab: int):
        self.answer, self.prompt_len, self.vocab = answer, prompt_len, vocab

    def begin(self, prompt, forward, *, kept=0) -> None:
        pass

    def trim(self, keep: int) -> int:
        return keep

    @property
    def shape(self):
        from homespec.contracts.drafter import DraftShape

        return DraftShape(3, 2, 7)

    def propose(self, root: int, context) -> DraftTree:
        done = len(context) + 1 - self.prompt_len  # answer tokens emitted so far, the root included
        tokens, parents, at = [root], [-1], 0
        for tok in self.answer[done:done + 3]:
            tokens += [(tok + 1) % self.vocab, tok]
            parents += [at, at]
            at = len(tokens) - 1
        return DraftTree.of(tokens, parents)

    def accept(self, tokens, features, next_token) -> None:
        pass

    def reset(self) -> None:
        pass


@needs_triton
@pytest.mark.slow
def test_greedy_speculation_through_triton_equals_plain_greedy(tmp_path, monkeypatch):
    # the torch backend's tree mask and its KV compaction in Triton (acceptance is numpy's)
    from homespec.backends.torch.backend import TorchBackend
    from homespec.engine.run import decode
    from homespec.speculative.steps import Limits
    from tiny_models import make_tiny_hf_dir, write_word_tokenizer

    vocab, n = 256, 24
    model_dir = make_tiny_hf_dir(tmp_path / "m", n_vocab=vocab, n_layer=3, seed=9)
    write_word_tokenizer(model_dir, vocab)
    backend = TorchBackend.load(str(model_dir), device="cpu", max_context=96)
    prompt = torch.randint(0, vocab, (9,), generator=torch.Generator().manual_seed(9)).tolist()
    limits = Limits(max_tokens=n, stop_at_eos=False)
    monkeypatch.setenv("HOMESPEC_KERNELS", "torch")
    plain = [t for s in decode(backend, None, prompt, limits=limits) for t in s.tokens]
    backend.reset()
    monkeypatch.setenv("HOMESPEC_KERNELS", "triton")
    steps = list(decode(backend, _SecondChildOracle(plain, len(prompt), vocab), prompt, limits=limits))
    assert [t for s in steps for t in s.tokens] == plain
    assert sum(s.accepted for s in steps) >= n - 8  # the drafts were accepted, through moved rows


@pytest.mark.slow
def test_an_installed_wheel_carries_and_loads_the_kernels(tmp_path):
    # build from a copy of the project, install the wheel alone, import it from outside the tree
    src = tmp_path / "src"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
    shutil.copytree(ROOT / "homespec", src / "homespec", ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "whl"), str(src)],
                   check=True, capture_output=True, timeout=600)
    wheel = next((tmp_path / "whl").glob("homespec-*.whl"))
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    want = {f"homespec/data/kernels/{f}" for f in ("triton/tree_kernels.py", "cuda/tree_kernels.cu", "cuda/binding.cpp",
                                                    "metal/tree_kernels.metal")}
    want |= {"homespec/kernels/select.py", "homespec/kernels/reference.py"}  # the code stays in the package
    assert want <= names, want - names
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=600)
    probe = ("import json, homespec.kernels as k; "
             "print(json.dumps([str(k.kernels_dir()), {s.impl: [s.usable, s.reason] for s in k.available()}]))")
    env = {key: v for key, v in os.environ.items() if key not in ("PYTHONPATH", "HOMESPEC_KERNELS_DIR")}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={**env, "PYTHONPATH": str(site)},
                         check=True, capture_output=True, text=True, timeout=300).stdout
    import json

    where, status = json.loads(out)
    assert Path(where) == site / "homespec" / "data" / "kernels"
    if has_triton:  # the installed package finds its own Triton source
        assert status["triton"][0], status["triton"]
    else:
        assert "not installed" in status["triton"][1]


# --- Triton: compiled for a GPU, not run ---------------------------------------------------------

# The interpreter runs kernels as Python and never type-checks a loop-carried variable; Triton's
# compiler does. Compiling for sm_90 (Triton bundles ptxas) catches on the CPU what would otherwise
# fail only on a GPU: an int32 loop variable re-assigned int64 parents did just that.
_COMPILE = r"""
import importlib.util, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

spec = importlib.util.spec_from_file_location("tree_kernels", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
i64 = "*i64"
cases = {
    "_greedy_paths_kernel": ({"tok_ptr": i64, "par_ptr": i64, "tgt_ptr": i64, "path_ptr": i64, "info_ptr": i64,
                              "T": "i32", "BLOCK": "constexpr"}, {"BLOCK": 16}),
    "_sampled_paths_kernel": ({"tok_ptr": i64, "par_ptr": i64, "prob_ptr": "*fp32", "stride_p": "i32",
                               "coin_ptr": "*fp32", "u_final": "fp32", "path_ptr": i64, "info_ptr": i64, "T": "i32",
                               "V": "i32", "BLOCK_T": "constexpr", "BLOCK_V": "constexpr"},
                              {"BLOCK_T": 16, "BLOCK_V": 1024}),
    "_tree_mask_kernel": ({"par_ptr": i64, "out_ptr": "*i8", "T": "i32", "n_past": "i32", "width": "i32",
                           "BLOCK_T": "constexpr", "BLOCK_P": "constexpr"}, {"BLOCK_T": 16, "BLOCK_P": 1024}),
    "_compact_kv_kernel": ({"k_ptr": "*fp16", "v_ptr": "*fp16", "node_ptr": i64, "n": "i32", "start": "i32",
                            "stride_row": "i32", "stride_slot": "i32", "D": "i32", "BLOCK_D": "constexpr"},
                           {"BLOCK_D": 64}),
}
for name, (sig, consts) in cases.items():
    k = triton.compile(ASTSource(getattr(m, name), sig, consts), target=GPUTarget("cuda", 90, 32))
    assert "cubin" in k.asm, name
    print(name, "ok")
"""


@pytest.mark.slow
@needs_triton
def test_triton_kernels_compile_for_a_gpu():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    proc = subprocess.run([sys.executable, "-c", _COMPILE, str(SOURCES / "triton" / "tree_kernels.py")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count(" ok") == 4


# --- CUDA C++: compiled, not run (no driver here) -----------------------------------------------


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_cuda_kernels_compile_with_nvcc(tmp_path):
    out = tmp_path / "tree_kernels.ptx"
    proc = subprocess.run(["nvcc", "-std=c++17", "-arch=sm_80", "-ptx", str(SOURCES / "cuda/tree_kernels.cu"),
                           "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    ptx = out.read_text()
    for name in ("greedy_paths_kernel", "sampled_paths_kernel", "compact_kv_kernel", "tree_mask_kernel"):
        assert name in ptx


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")
def test_cuda_binding_compiles_against_torch_headers(tmp_path):
    # A CPU build of torch ships the c10/cuda headers but not the one CMake generates;
    # supply it so the binding's C++ is checked against torch's real API.
    from torch.utils.cpp_extension import include_paths

    gen = tmp_path / "c10" / "cuda" / "impl"
    gen.mkdir(parents=True)
    (gen / "cuda_cmake_macros.h").write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    from torch.utils.cpp_extension import CUDA_HOME

    cuda_inc = Path(CUDA_HOME or "/usr/local/cuda") / "include"
    if not (cuda_inc / "cuda_runtime_api.h").is_file():
        pytest.skip("no CUDA toolkit headers")
    cmd = ["g++", "-std=c++20", "-fsyntax-only", "-w", *[f"-I{p}" for p in include_paths()], f"-I{tmp_path}",
           f"-I{cuda_inc}", f"-I{sysconfig.get_paths()['include']}", "-DTORCH_EXTENSION_NAME=homespec_tree_kernels",
           str(SOURCES / "cuda/binding.cpp")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]


# --- Metal (macOS only) ---------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform != "darwin" or not torch.backends.mps.is_available(), reason="needs macOS with MPS")
def test_metal_kernels_match_reference():
    tokens, parents, target = greedy_case(40, 4, 5)
    dev = torch.device("mps")
    a = ref.verify_greedy_paths(tokens, parents, target)
    b = kernels.verify_greedy_paths(tokens.to(dev), parents.to(dev), target.to(dev), impl="metal")
    assert a.to_verdict() == b.to_verdict()
    assert torch.equal(kernels.tree_mask(parents.to(dev), 9, impl="metal").cpu(), ref.tree_mask(parents, 9))
    k = torch.randn(2, 2, 80, 16, dtype=torch.float16)
    v = torch.randn(2, 2, 80, 16, dtype=torch.float16)
    nodes = torch.tensor([0, 1, 4, 6])
    km, vm = k.to(dev), v.to(dev)
    ref.compact_kv(k, v, 20, nodes)
    kernels.compact_kv(km, vm, 20, nodes.to(dev), impl="metal")
    assert torch.equal(km.cpu(), k) and torch.equal(vm.cpu(), v)


def test_a_forced_kernel_on_tensors_it_cannot_serve_is_one_line(monkeypatch):
    """HOMESPEC_KERNELS=triton|cuda|metal with CPU tensors (the torch backend on the CPU): a usage
    error, not a crash inside the kernel."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    tokens, parents, target = greedy_case(3, 8, 0)
    for impl in ("triton", "cuda", "metal"):
        monkeypatch.setenv("HOMESPEC_KERNELS", impl)
        with pytest.raises(UsageError, match=f"the {impl} kernels cannot run on cpu tensors"):
            kernels.verify_greedy_paths(tokens, parents, target)
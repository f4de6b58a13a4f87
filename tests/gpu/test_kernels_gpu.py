"""Kernels against their torch references on a CUDA GPU (compiled Triton and the CUDA C++
extension; the CPU tests only interpret Triton and compile the CUDA sources)."""

from __future__ import annotations


import pytest
import torch

from tests.kernels.test_kernels import greedy_case, random_tree, sampled_case  # noqa: E402

from homespec import kernels  # noqa: E402
from homespec.kernels import reference as ref  # noqa: E402
from homespec.kernels import select  # noqa: E402

pytestmark = pytest.mark.gpu
IMPLS = ["triton", "cuda"]


def _need(impl: str) -> None:
    got = select._load(impl)
    if isinstance(got, select._Unavailable):
        pytest.skip(f"{impl}: {got}")


@pytest.mark.parametrize("impl", IMPLS)
def test_greedy_and_mask(impl):
    _need(impl)
    dev = torch.device("cuda")
    for t in (1, 7, 60, 200):
        tokens, parents, target = greedy_case(t, 4, t)
        a = ref.verify_greedy_paths(tokens, parents, target)
        b = kernels.verify_greedy_paths(tokens.to(dev), parents.to(dev), target.to(dev), impl=impl)
        assert a.to_verdict() == b.to_verdict()
        assert torch.equal(a.path, b.path.cpu())
        assert torch.equal(ref.tree_mask(parents, 33), kernels.tree_mask(parents.to(dev), 33, impl=impl).cpu())


@pytest.mark.parametrize("impl", IMPLS)
def test_sampled(impl):
    _need(impl)
    dev = torch.device("cuda")
    for t, v in ((1, 10), (20, 1500), (60, 49152)):
        for seed in range(3):
            tokens, parents, probs, coins, u = sampled_case(t, v, seed)
            a = ref.verify_sampled_paths(tokens, parents, probs, coins, u)
            b = kernels.verify_sampled_paths(tokens.to(dev), parents.to(dev), probs.to(dev), coins.to(dev), u, impl=impl)
            assert a.to_verdict() == b.to_verdict()


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_compact(impl, dtype):
    _need(impl)
    k = torch.randn(30, 3, 512, 64, dtype=dtype, device="cuda")
    v = torch.randn_like(k)
    parents = random_tree(60, torch.Generator().manual_seed(1))
    path = [59]
    while parents[path[-1]] >= 0:
        path.append(int(parents[path[-1]]))
    nodes = torch.tensor(path[::-1], device="cuda")
    k1, v1, k2, v2 = k.clone(), v.clone(), k.clone(), v.clone()
    ref.compact_kv(k1, v1, 100, nodes)
    kernels.compact_kv(k2, v2, 100, nodes, impl=impl)
    assert torch.equal(k1, k2) and torch.equal(v1, v2)

"""Kernels for the speculative loop's small steps on torch tensors: tree acceptance, KV compaction,
tree masks. The torch backend and EXL2 call the mask and compaction kernels; acceptance on every run
path is numpy's (homespec.speculative.verify), which the acceptance kernels are tested against.

`select` loads and picks an implementation per tensor device (Triton or CUDA C++ on CUDA,
Metal on MPS, the torch `reference` elsewhere); the kernel sources under triton/, cuda/ and
metal/ ship as package data. docs/kernels.md describes each operation and who calls it.
"""

from homespec.kernels.select import (
    IMPLS,
    KernelStatus,
    available,
    compact_kv,
    kernels_dir,
    selected,
    tree_mask,
    verify_greedy_paths,
    verify_sampled_paths,
)

__all__ = [
    "IMPLS",
    "KernelStatus",
    "available",
    "compact_kv",
    "kernels_dir",
    "selected",
    "tree_mask",
    "verify_greedy_paths",
    "verify_sampled_paths",
]

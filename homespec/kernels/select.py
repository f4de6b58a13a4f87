"""Which implementation runs each kernel, chosen per tensor device; loads each once.

Three operations run once per draft tree and are otherwise tens of tiny launches or a host
round trip per node: greedy (and sampled) tree acceptance, accepted-path KV compaction, and the
tree attention mask. Each has

* a torch reference (homespec/kernels/reference.py) that defines its semantics and is the fallback;
* a Triton kernel (triton/tree_kernels.py): CUDA tensors, or CPU under TRITON_INTERPRET=1;
* a CUDA C++ extension (cuda/), built on first use with torch.utils.cpp_extension;
* a Metal library (metal/tree_kernels.metal) compiled by torch.mps.compile_shader.

Choice: HOMESPEC_KERNELS=auto (default) | torch | triton | cuda | metal, or `impl=` per call.
auto picks Triton then CUDA C++ for CUDA tensors, Metal for MPS tensors, torch otherwise. A
kernel that fails to load is reported by available() and never retried in the process.

The sources are package data beside this module (homespec/kernels/{triton,cuda,metal}/), so an
installed wheel carries them; HOMESPEC_KERNELS_DIR points at another folder of the same layout.
torch is imported lazily: importing homespec.kernels costs nothing until a kernel is used.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from homespec.errors import UsageError

if TYPE_CHECKING:
    import torch

    from homespec.kernels.reference import PathChoice

IMPLS = ("torch", "triton", "cuda", "metal")


def kernels_dir() -> Path:
    """The folder holding triton/, cuda/ and metal/: the project's top-level kernels/, which the
    package carries as homespec/data/kernels (a link in a checkout, a copy in a wheel), or
    HOMESPEC_KERNELS_DIR."""
    env = os.environ.get("HOMESPEC_KERNELS_DIR")
    return Path(env) if env else (Path(__file__).resolve().parent.parent / "data" / "kernels").resolve()


@dataclass(frozen=True, slots=True)
class KernelStatus:
    impl: str  # "torch" | "triton" | "cuda" | "metal"
    usable: bool
    reason: str  # why not, or what it runs on


class _Unavailable(Exception):
    pass


# --- loaders (each runs once per process; a failure is remembered) ------------------------


@functools.lru_cache(maxsize=None)
def _load(impl: str) -> Any:
    """The module / library object of one implementation, or _Unavailable with the reason."""
    try:
        if impl == "torch":
            import homespec.kernels.reference as ref  # torch: the reference loads only when chosen

            return ref
        if impl == "triton":
            return _load_triton()
        if impl == "cuda":
            return _load_cuda()
        if impl == "metal":
            return _load_metal()
    except _Unavailable as e:
        return e
    except Exception as e:  # a broken toolchain must not break generation: fall back, and say why
        return _Unavailable(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    raise UsageError(f"unknown kernel implementation '{impl}'", hint=f"choose one of: {', '.join(IMPLS)}")


def _load_triton() -> Any:
    if importlib.util.find_spec("triton") is None:
        raise _Unavailable("triton is not installed (pip install triton; requirements/dev.txt pins it)")
    src = kernels_dir() / "triton" / "tree_kernels.py"
    if not src.is_file():
        raise _Unavailable(f"{src} not found")
    spec = importlib.util.spec_from_file_location("homespec_triton_tree_kernels", src)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # triton's @jit reads the source through the module
    spec.loader.exec_module(mod)
    return mod


def _load_cuda() -> Any:
    import torch

    if not torch.cuda.is_available():
        raise _Unavailable("no CUDA device (torch.cuda.is_available() is False)")
    from torch.utils.cpp_extension import load

    folder = kernels_dir() / "cuda"
    sources = [str(folder / "binding.cpp"), str(folder / "tree_kernels.cu")]
    if not all(Path(s).is_file() for s in sources):
        raise _Unavailable(f"CUDA sources not found in {folder}")
    # compiled once into torch's extension cache (~/.cache/torch_extensions), then reused
    return load(name="homespec_tree_kernels", sources=sources, extra_cuda_cflags=["-O3"], verbose=False)


def _load_metal() -> Any:
    import torch

    if not (hasattr(torch, "mps") and torch.backends.mps.is_available()):
        raise _Unavailable("no Metal device (torch.backends.mps.is_available() is False)")
    src = kernels_dir() / "metal" / "tree_kernels.metal"
    if not src.is_file():
        raise _Unavailable(f"{src} not found")
    return torch.mps.compile_shader(src.read_text())


def available() -> tuple[KernelStatus, ...]:
    """Which implementations can run here, and why the others cannot (loads each once)."""
    out = []
    for impl in IMPLS:
        got = _load(impl)
        if isinstance(got, _Unavailable):
            out.append(KernelStatus(impl, False, str(got)))
        else:
            where = {"torch": "any device", "triton": "CUDA tensors (CPU with TRITON_INTERPRET=1)",
                     "cuda": "CUDA tensors", "metal": "MPS tensors"}[impl]
            out.append(KernelStatus(impl, True, where))
    return tuple(out)


# the device type each forced implementation serves (Triton's interpreter also runs CPU tensors)
_SERVES = {"triton": ("cuda",), "cuda": ("cuda",), "metal": ("mps",)}


def _check_device(want: str, device: "torch.device") -> None:
    """A forced implementation on tensors it cannot serve is a usage error, not a crash inside it."""
    serves = _SERVES.get(want)
    interpreted = want == "triton" and os.environ.get("TRITON_INTERPRET") == "1"
    if serves and device.type not in serves and not interpreted:
        raise UsageError(f"the {want} kernels cannot run on {device.type} tensors (HOMESPEC_KERNELS={want})",
                         hint=f"unset HOMESPEC_KERNELS, or use it with a backend on {serves[0]}")


def _choose(device: "torch.device", impl: str | None) -> tuple[str, Any]:
    want = (impl or os.environ.get("HOMESPEC_KERNELS", "auto")).lower()
    if want != "auto":
        _check_device(want, device)
        got = _load(want)
        if isinstance(got, _Unavailable):
            raise UsageError(f"the {want} kernels cannot run here: {got}", hint="unset HOMESPEC_KERNELS to use the fastest available")
        return want, got
    order = {"cuda": ("triton", "cuda"), "mps": ("metal",)}.get(device.type, ())
    for name in order:
        got = _load(name)
        if not isinstance(got, _Unavailable):
            return name, got
    return "torch", _load("torch")


def selected(device: "str | torch.device") -> str:
    """The implementation auto mode uses for tensors on `device`."""
    import torch

    return _choose(torch.device(device), None)[0]


# --- the operations ---------------------------------------------------------------------------


def _path_choice(path: "torch.Tensor", length: "torch.Tensor", nxt: "torch.Tensor") -> "PathChoice":
    from homespec.kernels.reference import PathChoice  # torch: the reference loads only when chosen

    return PathChoice(path=path, length=length.long().reshape(()), next_token=nxt.long().reshape(()))


def verify_greedy_paths(tokens: "torch.Tensor", parents: "torch.Tensor", target: "torch.Tensor",
                        *, impl: str | None = None) -> "PathChoice":
    """Greedy acceptance over a whole tree in one launch.

    tokens, parents: [T] int64 (the draft tree); target: [T] int64 argmax of the target's logits
    at every node. Returns the deepest fully-correct path (lowest index among equals) and the
    target's token after it; semantics in reference.verify_greedy_paths.
    """
    name, mod = _choose(tokens.device, impl)
    if name == "torch":
        return mod.verify_greedy_paths(tokens, parents, target)
    if name == "triton":
        return _path_choice(*mod.verify_greedy_paths(tokens, parents, target))
    path, info = _outputs(tokens)
    if name == "cuda":
        mod.greedy_paths(tokens.long().contiguous(), parents.long().contiguous(), target.long().contiguous(), path, info)
    else:  # metal: one threadgroup, one thread per node
        t = int(tokens.shape[0])
        mod.greedy_paths(tokens.long().contiguous(), parents.long().contiguous(), target.long().contiguous(), path, info, t,
                         threads=_pow2(t), group_size=_pow2(t))
    return _path_choice(path, info[0], info[1])


def verify_sampled_paths(tokens: "torch.Tensor", parents: "torch.Tensor", probs: "torch.Tensor",
                         coins: "torch.Tensor", u_final: float, *, impl: str | None = None) -> "PathChoice":
    """Tree rejection sampling (deterministic children) with explicit uniforms; see
    reference.verify_sampled_paths. probs: [T, V]; coins: [T] float; u_final in [0, 1)."""
    name, mod = _choose(tokens.device, impl)
    if name == "metal":  # not ported to Metal: the reference runs on the MPS tensors
        name, mod = "torch", _load("torch")
    if name == "torch":
        return mod.verify_sampled_paths(tokens, parents, probs, coins, u_final)
    if name == "triton":
        return _path_choice(*mod.verify_sampled_paths(tokens, parents, probs, coins, u_final))
    path, info = _outputs(tokens)
    mod.sampled_paths(tokens.long().contiguous(), parents.long().contiguous(), probs.double().contiguous(),
                      coins.double().contiguous(), float(u_final), path, info)
    return _path_choice(path, info[0], info[1])


def compact_kv(k_cache: "torch.Tensor", v_cache: "torch.Tensor", start: int, nodes: "torch.Tensor",
               *, impl: str | None = None) -> None:
    """In place: slot start+i of both [L, Hkv, C, D] caches receives node nodes[i]'s row (node j
    of the last forward sits in slot start+j). nodes: [n] int64 root first, increasing."""
    name, mod = _choose(k_cache.device, impl)
    nodes = nodes.to(device=k_cache.device, dtype=_long())
    if name in ("torch", "triton"):
        mod.compact_kv(k_cache, v_cache, start, nodes)
    elif name == "cuda":
        mod.compact_kv(k_cache, v_cache, nodes, int(start))
    else:
        L, H, C, D = k_cache.shape
        lib_fn = getattr(mod, f"compact_kv_{_metal_suffix(k_cache)}")
        lib_fn(k_cache, v_cache, nodes, int(nodes.shape[0]), int(start), C * D, D, threads=[D, L * H, 1],
               group_size=[min(D, 64), 1, 1])


def tree_mask(parents: "torch.Tensor", n_past: int, *, impl: str | None = None) -> "torch.Tensor":
    """[T, n_past + T] bool: the committed prefix, then each node's ancestor-or-self set."""
    import torch

    name, mod = _choose(parents.device, impl)
    if name in ("torch", "triton"):
        return mod.tree_mask(parents, n_past)
    t = int(parents.shape[0])
    out = torch.empty(t, n_past + t, dtype=torch.int8, device=parents.device)
    if name == "cuda":
        mod.tree_mask(parents.long().contiguous(), out, int(n_past))
    else:
        mod.tree_mask(parents.long().contiguous(), out, t, int(n_past), threads=[n_past + t, t, 1],
                      group_size=[min(n_past + t, 256), 1, 1])
    return out.view(torch.bool)


def _outputs(like: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
    import torch

    t = int(like.shape[0])
    return (torch.empty(t, dtype=torch.int64, device=like.device),  # path [T]
            torch.empty(2, dtype=torch.int64, device=like.device))  # (length, next token)


def _long() -> "torch.dtype":
    import torch

    return torch.int64


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _metal_suffix(t: "torch.Tensor") -> str:
    import torch

    names = {torch.float16: "half", torch.bfloat16: "bfloat", torch.float32: "float"}
    if t.dtype not in names:
        raise UsageError(f"no Metal KV compaction for {t.dtype}", hint="use a float16, bfloat16 or float32 cache")
    return names[t.dtype]

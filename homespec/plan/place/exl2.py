"""exllamav2's placement: every layer on the GPUs, the embeddings on the CPU; there is no CPU
offload, and it runs on CUDA (or ROCm) GPUs only. load_autosplit fills the GPUs in order: each
takes modules until it is full, keeping 192 MiB free on the first and 64 MiB on the others, then
the next GPU takes over (exllamav2/model.py, load_autosplit_gen). Its forward scratch is sized for
max_input_len tokens, which it caps at the context."""

from __future__ import annotations

from homespec.errors import UsageError
from homespec.plan import memory as mem
from homespec.plan.devices import HOST, Device
from homespec.plan.lines import LineKind
from homespec.plan.place.ledger import Layout, Ledger, Placement, add_draft, add_layers, assign_layers, used_gpus
from homespec.plan.settings import Settings
from homespec.types import DraftSpec, Machine, ModelSpec

# GPU vendors exllamav2 has kernels for (CUDA and ROCm builds of torch).
VENDORS = ("nvidia", "amd")


def layout(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> Layout:
    """The line items of every layer on the GPUs, s.layer_split of them on each."""
    led = Ledger(machine)
    placement = _placement(model, s, led.gpus)
    out_dev = add_layers(led, model, s, placement)
    on_gpus = used_gpus(placement)
    tokens = mem.exl2_input_len(s)
    for d in on_gpus or [HOST]:
        scratch = mem.exl2_scratch_bytes(model, tokens)
        led.add(LineKind.COMPUTE, d, scratch if d == out_dev else scratch // 4, f"scratch for {tokens} tokens")
    for i, g in enumerate(led.gpus):
        if g.id in on_gpus:
            led.add(LineKind.RESERVE, g.id, reserve(g, i), "CUDA context + driver" if g.vendor == "nvidia" else "backend runtime")
    draft_dev = led.by_id[on_gpus[0]] if on_gpus else led.host
    draft_bytes = add_draft(led, model, draft, s, draft_dev, scratch_device=draft_dev.id, embeddings_copy=True)
    return led.finish(s, draft, draft_dev, draft_bytes)


def _placement(model: ModelSpec, s: Settings, gpus: list[Device]) -> list[int]:
    """Every layer and the output layer on the GPUs, s.layer_split of them on each in order."""
    if not gpus:
        return [HOST] * (model.n_layer + 1)
    return assign_layers(model, s.with_(n_gpu_layers=model.n_layer + 1), gpus)


def reserve(g: Device, index: int) -> int:
    """What load_autosplit keeps free on the GPU (its reserve_vram defaults)."""
    return mem.EXL2_RESERVE_FIRST if index == 0 else mem.EXL2_RESERVE_OTHER


def place(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> Placement:
    """Fill the GPUs in order, as load_autosplit does: each takes the most of the remaining layers
    that fit beside what it already holds; the last takes whatever is left (and may overflow)."""
    check_machine(machine)
    slots = model.n_layer + 1  # the repeating layers and the output layer
    s = s.with_(n_gpu_layers=slots)
    split: list[int] = []
    for i in range(len(machine.gpus) - 1):
        left = slots - sum(split)

        def fits(k: int) -> bool:
            trial = s.with_(layer_split=(*split, k, left - k))
            return i not in layout(model, draft, machine, trial).over

        lo, hi = 0, left  # k = 0 always fits: the GPU holds nothing
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        split.append(lo)
    split.append(slots - sum(split))
    s2 = s.with_(layer_split=tuple(split))
    return Placement(s2, layout(model, draft, machine, s2), 0)


def check_machine(machine: Machine) -> None:
    """exllamav2 has CUDA and ROCm kernels only: a machine without such a GPU cannot run it at all."""
    if machine.gpus and all(g.vendor in VENDORS for g in machine.gpus):
        return
    where = "this machine has no GPU" if not machine.gpus else f"the {machine.gpus[0].name} is neither"
    raise UsageError(f"the exl2 backend runs on NVIDIA (CUDA) or AMD (ROCm) GPUs only; {where}",
                     hint="plan for such a GPU (--gpu 4090), or a GGUF quant on llama.cpp (--backend llamacpp "
                          "with a GGUF file, or a catalogue name such as --model llama-3.1-8b-q4)")

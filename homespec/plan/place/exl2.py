"""exllamav2's placement: every layer on the GPUs (autosplit fills them in order), the embeddings
on the CPU; there is no CPU offload. Its forward scratch is sized for max_input_len tokens."""

from __future__ import annotations

from homespec.plan import memory as mem
from homespec.plan.devices import Device
from homespec.plan.place.ledger import Layout, Ledger, Placement, add_draft, add_layers, assign_layers, split_layers, used_gpus
from homespec.plan.settings import Settings
from homespec.types import DraftSpec, Machine, ModelSpec


def layout(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> Layout:
    """The line items of every layer on the GPUs, s.layer_split of them on each."""
    led = Ledger(machine)
    placement = _placement(model, s, led.gpus)
    out_dev = add_layers(led, model, s, placement)
    on_gpus = used_gpus(placement)
    for d in on_gpus or ["host"]:
        scratch = mem.exl2_scratch_bytes(model)
        led.add("compute", d, scratch if d == out_dev else scratch // 4, f"scratch for {mem.EXL2_MAX_INPUT_LEN} tokens")
    for i, g in enumerate(led.gpus):
        if g.id in on_gpus:
            led.add("reserve", g.id, _reserve(g, i), "CUDA context + driver" if g.vendor == "nvidia" else "backend runtime")
    draft_dev = led.by_id[on_gpus[0]] if on_gpus else led.host
    draft_bytes = add_draft(led, model, draft, s, draft_dev, scratch_device=draft_dev.id, embeddings_copy=True)
    return led.finish(s, draft, draft_dev, draft_bytes)


def _placement(model: ModelSpec, s: Settings, gpus: list[Device]) -> list[str]:
    """exllamav2 holds every layer on GPUs; no GPU at all leaves the model nowhere to run."""
    if not gpus:
        return ["host"] * (model.n_layer + 1)
    return assign_layers(model, s.with_(n_gpu_layers=model.n_layer + 1), gpus)


def _reserve(g: Device, index: int) -> int:
    if g.vendor == "apple":
        return mem.APPLE_RESERVE
    return mem.EXL2_RESERVE_FIRST if index == 0 else mem.EXL2_RESERVE_OTHER


def place(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> Placement:
    """Every layer on the GPUs, shared in proportion to what each has left after its fixed costs."""
    n = model.n_layer
    if not machine.gpus:
        s2 = s.with_(n_gpu_layers=0, layer_split=())
        return Placement(s2, layout(model, draft, machine, s2), 0)
    s2 = split_layers(layout, model, draft, machine, s, n + 1)
    return Placement(s2, layout(model, draft, machine, s2), 0)

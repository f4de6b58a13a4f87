"""The torch backend's placement: the whole model, dequantised to one float type, on one device
(the first GPU, else the CPU), its KV cache and activations beside it."""

from __future__ import annotations

from homespec.plan import memory as mem
from homespec.plan.lines import LineKind
from homespec.plan.place.ledger import Layout, Ledger, Placement, add_draft
from homespec.plan.settings import Settings
from homespec.quant.weights import group_weights
from homespec.types import DraftSpec, Machine, ModelSpec


def layout(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> Layout:
    led = Ledger(machine)
    dev = led.gpus[0] if led.gpus else led.host
    run = s if dev.is_gpu else s.with_(torch_dtype="f32")  # on the CPU the backend runs fp32
    elt = 4 if run.torch_dtype == "f32" else 2
    w = mem.torch_weight_bytes(model, elt)
    led.add(LineKind.WEIGHTS, dev.id, w, f"{model.n_params or 0:,} params x {elt} B (dequantised)")
    kv = sum(mem.target_kv_layer_bytes(model, run, i) for i in range(model.n_layer))
    led.add(LineKind.TARGET_KV, dev.id, kv, f"{s.n_ctx} tokens x {model.n_layer} layers")
    tokens = max(s.tree_tokens, min(s.n_ubatch, s.n_ctx))
    led.add(LineKind.COMPUTE, dev.id, mem.torch_compute_bytes(model, run, tokens), f"one forward of {tokens} tokens")
    if dev.is_gpu and dev.vendor == "nvidia":
        led.add(LineKind.RESERVE, dev.id, mem.TORCH_CUDA_RESERVE, "CUDA context + cuBLAS + allocator slack")
    led.read[dev.id] += w + kv / 2
    led.params[dev.id] += group_weights(model).n_params
    # The head embeds with the backend's own token table: no copy of it.
    draft_bytes = add_draft(led, model, draft, s, dev, scratch_device=dev.id, embeddings_copy=False)
    return led.finish(s, draft, dev, draft_bytes)


def place(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> Placement:
    """Everything on the first GPU (n_layer + 1 layers, the output included), else on the CPU."""
    n = model.n_layer
    on_gpu = bool(machine.gpus)
    s2 = s.with_(n_gpu_layers=(n + 1) if on_gpu else 0, layer_split=((n + 1),) if on_gpu else ())
    return Placement(s2, layout(model, draft, machine, s2), 0)

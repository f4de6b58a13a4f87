"""The solver: place layers on devices, budget every consumer, and say whether it fits.

`solve()` returns the Plan that `homespec plan` prints and that starts a backend (the same
object: docs/architecture.md, contract 4). Placement follows each engine's own rules:

* llama.cpp offloads the *last* n_gpu_layers layers; the output layer goes to a GPU only when
  n_gpu_layers > n_layer; the input embedding always stays on the host (llama-model.cpp,
  load_tensors: "very little benefit to offloading the input layer").
* exllamav2 must hold every layer on GPUs (autosplit fills them in order); embeddings stay on the CPU.
* the torch backend holds the whole model on one device.
"""

from __future__ import annotations

from dataclasses import dataclass

from homespec.plan import memory as mem
from homespec.plan.devices import Device, devices_for, host_cores
from homespec.plan.settings import Settings, check_settings
from homespec.plan.speed import DeviceLoad, Estimate, estimate
from homespec.types import DraftSpec, Machine, ModelSpec

FITS = "fits"
FITS_OFFLOADED = "fits_offloaded"
NO_FIT = "does_not_fit"


@dataclass(frozen=True, slots=True)
class DeviceUse:
    device: Device
    used_bytes: int  # the items placed on this device
    # Bytes other devices hold in this device's memory: on Apple Silicon the GPU's working set is
    # part of the RAM, so the host's pool also carries the GPU's use (docs/planner.md, "Apple Silicon").
    shared_bytes: int = 0

    @property
    def headroom_bytes(self) -> int:
        return self.device.capacity_bytes - self.used_bytes - self.shared_bytes


def device_uses(devs: tuple[Device, ...], items: tuple[mem.LineItem, ...] | list[mem.LineItem]) -> tuple[DeviceUse, ...]:
    """What each device holds; on a unified-memory machine the host's pool also holds the GPU's share."""
    used = {d.id: mem.sum_bytes(items, d.id) for d in devs}
    unified = any(d.vendor == "apple" for d in devs)
    gpu_total = sum(used[d.id] for d in devs if d.is_gpu)
    return tuple(DeviceUse(d, used[d.id], gpu_total if unified and not d.is_gpu else 0) for d in devs)


@dataclass(frozen=True, slots=True)
class Plan:
    model: ModelSpec
    draft: DraftSpec | None
    machine: Machine
    settings: Settings
    items: tuple[mem.LineItem, ...]
    devices: tuple[DeviceUse, ...]
    verdict: str
    estimate: Estimate
    offloaded_layers: int  # target layers left on the host
    suggestions: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def total_bytes(self) -> int:
        return mem.sum_bytes(self.items)

    @property
    def headroom_bytes(self) -> int:
        """Free bytes on the tightest device the plan uses (negative: over by that much); on a Mac
        the host's figure is the unified pool's, GPU and CPU together."""
        return min((d.headroom_bytes for d in self.devices if d.used_bytes or d.shared_bytes), default=0)

    @property
    def tightest(self) -> DeviceUse | None:
        used = [d for d in self.devices if d.used_bytes or d.shared_bytes]
        return min(used, key=lambda d: d.headroom_bytes, default=None)

    @property
    def unified(self) -> bool:
        """GPU and CPU share one pool of RAM (Apple Silicon)."""
        return any(d.device.vendor == "apple" for d in self.devices)

    @property
    def fits(self) -> bool:
        return self.verdict != NO_FIT


@dataclass(frozen=True, slots=True)
class _Layout:
    items: tuple[mem.LineItem, ...]
    loads: list[DeviceLoad]
    draft_device: Device | None
    draft_bytes: int
    uses: tuple[DeviceUse, ...]
    over: dict[str, int]  # device id -> bytes over capacity (only devices that overflow)


def _assign_layers(model: ModelSpec, s: Settings, gpus: list[Device]) -> list[str]:
    """Device id of every layer, index n_layer being the output layer."""
    n = model.n_layer
    ngl = max(0, min(s.n_gpu_layers, n + 1))
    placement = ["host"] * (n + 1)
    if not gpus or ngl == 0:
        return placement
    first = n + 1 - ngl if ngl > n else n - ngl
    split = list(s.layer_split) or [ngl]
    gpu_of = []
    for i, count in enumerate(split):
        gpu_of += [gpus[min(i, len(gpus) - 1)].id] * count
    for k, layer in enumerate(range(first, n + 1 if ngl > n else n)):
        placement[layer] = gpu_of[min(k, len(gpu_of) - 1)]
    return placement


def _layout(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> _Layout:
    devs = devices_for(machine)
    gpus = [d for d in devs if d.is_gpu]
    host = devs[-1]
    by_id = {d.id: d for d in devs}
    items: list[mem.LineItem] = []
    read: dict[str, float] = {d.id: 0.0 for d in devs}
    params: dict[str, float] = {d.id: 0.0 for d in devs}

    if s.backend == "torch":
        dev = gpus[0] if gpus else host
        elt = 4 if not dev.is_gpu else (4 if s.torch_dtype == "f32" else 2)
        w = mem.torch_weight_bytes(model, elt)
        items.append(mem.LineItem("weights", dev.id, w, f"{model.n_params or 0:,} params x {elt} B (dequantised)"))
        kv = sum(mem.target_kv_layer_bytes(model, s.with_(torch_dtype="f32" if not dev.is_gpu else s.torch_dtype), i)
                 for i in range(model.n_layer))
        items.append(mem.LineItem("target KV", dev.id, kv, f"{s.n_ctx} tokens x {model.n_layer} layers"))
        tokens = max(s.tree_tokens, min(s.n_ubatch, s.n_ctx))
        items.append(mem.LineItem("compute", dev.id, mem.torch_compute_bytes(model, s, tokens), f"one forward of {tokens} tokens"))
        if dev.is_gpu and dev.vendor == "nvidia":
            items.append(mem.LineItem("reserve", dev.id, mem.TORCH_CUDA_RESERVE, "CUDA context + cuBLAS + allocator slack"))
        read[dev.id] += w + kv / 2
        params[dev.id] += mem.group_weights(model).n_params
        draft_dev = dev
    else:
        groups = mem.group_weights(model)
        placement = _assign_layers(model, s, gpus) if s.backend == "llamacpp" else _exl2_placement(model, s, gpus)
        per_dev_w: dict[str, int] = {}
        per_dev_kv: dict[str, int] = {}
        for layer in range(model.n_layer):
            d = placement[layer]
            per_dev_w[d] = per_dev_w.get(d, 0) + groups.per_layer[layer]
            per_dev_kv[d] = per_dev_kv.get(d, 0) + mem.target_kv_layer_bytes(model, s, layer)
        out_dev = placement[model.n_layer]
        # Tied models on the host read the one mmapped token_embd for both roles.
        out_bytes = groups.output if (out_dev != "host" or not groups.tied) else groups.output - groups.embd
        per_dev_w[out_dev] = per_dev_w.get(out_dev, 0) + out_bytes
        per_dev_w["host"] = per_dev_w.get("host", 0) + groups.embd + groups.other
        for d in [*[g.id for g in gpus], "host"]:
            if per_dev_w.get(d):
                n_l = sum(1 for p in placement[: model.n_layer] if p == d)
                label = f"{n_l} layers" + (" + output" if out_dev == d else "") + (" + embeddings" if d == "host" else "")
                items.append(mem.LineItem("weights", d, per_dev_w[d], label))
                read[d] += per_dev_w[d] - (groups.embd if d == "host" else 0)  # one embedding row per token
                params[d] += (per_dev_w[d] - (groups.embd if d == "host" else 0)) / max(1e-9, _bytes_per_param(model))
            if per_dev_kv.get(d):
                items.append(mem.LineItem("target KV", d, per_dev_kv[d], _kv_detail(model, s)))
                read[d] += per_dev_kv[d] / 2  # the average position reads half the cache
        repack = mem.cpu_repack_bytes(model, {i for i in range(model.n_layer) if placement[i] == "host"})
        if s.backend == "llamacpp" and repack:
            # The repacked copy replaces those tensors' mmapped pages (clean page cache, reclaimable
            # after load), so the host needs the file's bytes once: move them to their own line.
            for it_i, it in enumerate(items):
                if it.name == "weights" and it.device == "host":
                    items[it_i] = mem.LineItem("weights", "host", it.bytes - repack, it.detail + " (mmapped)")
            items.append(mem.LineItem("weights (CPU repack)", "host", repack, "Q4_0/Q4_K/IQ4_NL layers interleaved for the CPU kernels"))
        used_gpus = sorted({p for p in placement if p != "host"})
        for d in used_gpus or ["host"]:
            if s.backend == "llamacpp":
                items.append(mem.LineItem("compute", d, mem.llamacpp_compute_bytes(model, s, d == out_dev), _compute_detail(s)))
            else:
                items.append(mem.LineItem("compute", d, mem.exl2_scratch_bytes(model) if d == out_dev else
                                          mem.exl2_scratch_bytes(model) // 4, f"scratch for {mem.EXL2_MAX_INPUT_LEN} tokens"))
        if s.backend == "llamacpp" and used_gpus and out_dev != "host":
            # The host still runs the input embedding and receives the logits.
            host_compute = min(s.n_ubatch, s.n_batch) * model.n_embd * 4 * 2
            items.append(mem.LineItem("compute", "host", host_compute, "input embeddings of one ubatch"))
        for i, g in enumerate(gpus):
            if g.id in used_gpus:
                items.append(mem.LineItem("reserve", g.id, _reserve(s.backend, g, i), "CUDA context + driver" if g.vendor == "nvidia" else "backend runtime"))
        draft_dev = by_id[used_gpus[0]] if used_gpus else host

    draft_bytes = 0
    if draft is not None:
        on_gpu = draft_dev.is_gpu
        draft_bytes = mem.draft_weight_bytes(draft, on_gpu)
        items.append(mem.LineItem("draft weights", draft_dev.id, draft_bytes, _draft_detail(draft)))
        items.append(mem.LineItem("draft KV", draft_dev.id, mem.draft_kv_bytes(draft, s, on_gpu), f"{s.n_ctx} tokens x {draft.n_layer} layer(s)"))
        if draft.kind != "model":
            items.append(mem.LineItem("tree scratch", "host" if s.backend == "llamacpp" else draft_dev.id,
                                      mem.tree_scratch_bytes(model, draft, s), f"{s.tree_tokens}-node tree: logits + features"))
            if s.backend != "torch":
                # The head reads the target's token embeddings; homespec keeps an fp16 copy on the host.
                items.append(mem.LineItem("draft embeddings", "host", model.n_vocab * model.n_embd * 2, "fp16 copy of token_embd"))
        else:
            items.append(mem.LineItem("tree scratch", "host", (s.draft_depth + 1) * model.n_vocab * 4, "logits of the verified chain"))

    if s.memory_scale > 1.0:  # --calibrate: what this machine measured beyond the model
        totals: dict[str, int] = {}
        for it in items:
            totals[it.device] = totals.get(it.device, 0) + it.bytes
        for dev_id, subtotal in totals.items():
            extra = int(subtotal * (s.memory_scale - 1.0))
            items.append(mem.LineItem("calibration", dev_id, extra, f"measured/planned = {s.memory_scale:.3f}"))
    # One rule decides both the verdict and the headroom printed: a device is over when its
    # headroom is negative (on a Mac the host's headroom is the unified pool's).
    uses = device_uses(devs, items)
    over = {u.device.id: -u.headroom_bytes for u in uses if u.headroom_bytes < 0}
    loads = [DeviceLoad(d, int(read[d.id]), 2 * params[d.id]) for d in devs if read[d.id] > 0]
    return _Layout(tuple(items), loads, draft_dev if draft is not None else None, draft_bytes, uses, over)


def _bytes_per_param(model: ModelSpec) -> float:
    g = mem.group_weights(model)
    b = sum(g.per_layer) + g.embd + g.output + g.other - (g.embd if g.tied else 0)
    return b / g.n_params if g.n_params else 2.0


def _exl2_placement(model: ModelSpec, s: Settings, gpus: list[Device]) -> list[str]:
    """exllamav2 holds every layer on GPUs; no GPU at all leaves the model nowhere to run."""
    if not gpus:
        return ["host"] * (model.n_layer + 1)
    return _assign_layers(model, s.with_(n_gpu_layers=model.n_layer + 1), gpus)


def _reserve(backend: str, g: Device, index: int) -> int:
    if g.vendor == "apple":
        return mem.APPLE_RESERVE
    if backend == "exl2":
        return mem.EXL2_RESERVE_FIRST if index == 0 else mem.EXL2_RESERVE_OTHER
    return mem.CUDA_RESERVE


def _kv_detail(model: ModelSpec, s: Settings) -> str:
    return f"{s.n_ctx} tokens, K {s.type_k} / V {s.type_v}"


def _compute_detail(s: Settings) -> str:
    return f"ubatch {s.n_ubatch}, flash attention {'on' if s.flash_attn else 'off'}"


def _draft_detail(d: DraftSpec) -> str:
    if d.kind == "model":
        return f"draft model {d.name}"
    return f"{d.kind} head, draft vocab {d.draft_vocab:,}"


# --- searching placements --------------------------------------------------------------------


def _split_layers(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings, ngl: int) -> Settings:
    """Spread ngl GPU layers over the GPUs in proportion to what each has left after its fixed costs."""
    gpus = [d for d in devices_for(machine) if d.is_gpu]
    if len(gpus) <= 1:
        return s.with_(n_gpu_layers=ngl, layer_split=(ngl,) if gpus else ())
    n_slots = min(ngl, model.n_layer + 1)
    # Fixed costs: measure each GPU's use with no layers, then share the rest by capacity.
    probe = _layout(model, draft, machine, s.with_(n_gpu_layers=0))
    free = [max(1, g.capacity_bytes - mem.sum_bytes(probe.items, g.id) - mem.CUDA_RESERVE) for g in gpus]
    total = sum(free)
    split = [int(n_slots * f / total) for f in free]
    i = 0
    while sum(split) < n_slots:  # hand out the rounding remainder largest-first
        split[sorted(range(len(gpus)), key=lambda k: -free[k])[i % len(gpus)]] += 1
        i += 1
    return s.with_(n_gpu_layers=ngl, layer_split=tuple(split))


def _fits(layout: _Layout) -> bool:
    return not layout.over


def place(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> tuple[Settings, _Layout, int]:
    """The most GPU layers that fit (and the resulting layout); returns offloaded layer count."""
    gpus = [g for g in machine.gpus]
    n = model.n_layer
    if not gpus or s.backend == "torch":
        s2 = s.with_(n_gpu_layers=(n + 1) if gpus else 0, layer_split=((n + 1),) if gpus else ())
        return s2, _layout(model, draft, machine, s2), 0
    if s.backend == "exl2":
        s2 = _split_layers(model, draft, machine, s, n + 1)
        return s2, _layout(model, draft, machine, s2), 0
    # llama.cpp: binary search the largest n_gpu_layers whose GPU side fits.
    def gpu_ok(ngl: int) -> tuple[Settings, _Layout, bool]:
        s2 = _split_layers(model, draft, machine, s, ngl)
        lay = _layout(model, draft, machine, s2)
        return s2, lay, not any(k != "host" for k in lay.over)

    best = gpu_ok(0)
    lo, hi = 1, n + 1
    while lo <= hi:
        mid = (lo + hi) // 2
        cand = gpu_ok(mid)
        if cand[2]:
            best, lo = cand, mid + 1
        else:
            hi = mid - 1
    s2, lay, _ = best
    offloaded = n - min(n, s2.n_gpu_layers)
    return s2, lay, offloaded


def solve(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings, *, suggest: bool = True) -> Plan:
    check_settings(s)
    s2, lay, offloaded = place(model, draft, machine, s)
    notes: list[str] = []
    if not machine.gpus:
        notes.append("no GPU: everything runs on the CPU from RAM")
    output_on_host = bool(machine.gpus) and s2.backend == "llamacpp" and s2.n_gpu_layers <= model.n_layer
    if _fits(lay):
        verdict = FITS if offloaded == 0 and not output_on_host else FITS_OFFLOADED
    else:
        verdict = NO_FIT
    if output_on_host and offloaded == 0:
        notes.append("the output layer stays on the CPU (-ngl equal to the layer count); its matmul runs there")
    if s.n_ctx > model.n_ctx_train > 0:
        notes.append(f"--ctx {s.n_ctx} exceeds the model's trained context {model.n_ctx_train}")
    draft_loads = None
    if draft is not None and draft.kind == "model" and draft.model is not None:
        dl = _layout(draft.model, None, machine, s2)
        draft_loads = dl.loads
    est = estimate(lay.loads, draft, lay.draft_device, lay.draft_bytes, s2.tree_tokens, s2.draft_depth,
                   s2.draft_topk, host_cores(machine), draft_loads)
    if est.faster_tree_tokens:
        n = est.faster_tree_tokens
        notes.append(f"a {n}-node draft tree (--draft-tokens {n}) is estimated at {est.faster_spec_tokens_per_s:,.1f} tok/s "
                     f"here, against {est.spec_tokens_per_s:,.1f} with the {s2.tree_tokens} nodes budgeted")
    uses = lay.uses
    plan = Plan(model, draft, machine, s2, lay.items, uses, verdict, est, offloaded, (), tuple(notes))
    if suggest and verdict != FITS:
        from homespec.plan.suggest import suggestions

        plan = Plan(model, draft, machine, s2, lay.items, uses, verdict, est, offloaded,
                    tuple(suggestions(plan)), tuple(notes))
    return plan

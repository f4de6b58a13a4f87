"""What every backend's placement shares: the line-item ledger, the per-layer weights and KV, the
draft's items, calibration, and the per-device use and overflow the verdict reads.

A backend module (llamacpp.py, exl2.py, torch.py) decides *where* things go; the bytes come from
homespec.plan.memory and the bookkeeping from here, so a rule that holds for every engine (the
items on a device sum to its use; a device is over when its headroom is negative) is written once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from homespec.contracts.drafter import MAX_DEPTH
from homespec.plan import memory as mem
from homespec.plan.devices import HOST, Device, devices_for
from homespec.plan.lines import LineItem, LineKind, sum_bytes
from homespec.plan.network import Network
from homespec.plan.settings import Settings
from homespec.plan.speed import DeviceLoad
from homespec.quant.weights import active_fraction, group_weights
from homespec.types import DraftSpec, Machine, ModelSpec


@dataclass(frozen=True, slots=True)
class DeviceUse:
    device: Device
    used_bytes: int  # the items placed on this device
    # Bytes other devices hold in this device's memory: on a unified-memory machine the GPU's share is
    # part of the RAM, so the host's pool also carries the GPU's use (docs/planner.md, "Apple Silicon").
    shared_bytes: int = 0

    @property
    def headroom_bytes(self) -> int:
        return self.device.capacity_bytes - self.used_bytes - self.shared_bytes


def device_uses(devs: tuple[Device, ...], items: tuple[LineItem, ...] | list[LineItem]) -> tuple[DeviceUse, ...]:
    """What each device holds; on a unified-memory machine the host's pool also holds the GPU's share."""
    used = {d.id: sum_bytes(items, d.id) for d in devs}
    unified = any(d.unified for d in devs)
    gpu_total = sum(used[d.id] for d in devs if d.is_gpu and not d.remote)
    return tuple(DeviceUse(d, used[d.id], gpu_total if unified and not d.is_gpu else 0) for d in devs)


@dataclass(frozen=True, slots=True)
class Layout:
    """The line items of one fixed placement, and what the verdict and the speed estimate read of it."""

    items: tuple[LineItem, ...]
    loads: list[DeviceLoad]
    draft_device: Device | None
    draft_bytes: int
    uses: tuple[DeviceUse, ...]
    over: dict[int, int]  # device id -> bytes over capacity (only devices that overflow)
    network: Network | None = None  # the links to other machines' GPUs (llama.cpp's RPC backend)

    @property
    def fits(self) -> bool:
        return not self.over


@dataclass(frozen=True, slots=True)
class Placement:
    """What a backend's solver settles on."""

    settings: Settings  # with n_gpu_layers and layer_split filled in
    layout: Layout
    offloaded: int  # target layers left on the host
    output_on_host: bool = False  # llama.cpp: only -ngl 0 keeps the output layer on the CPU


# The two functions each backend module provides (homespec.plan.place.Placer).
LayoutFn = Callable[[ModelSpec, "DraftSpec | None", Machine, Settings], Layout]
PlaceFn = Callable[[ModelSpec, "DraftSpec | None", Machine, Settings], Placement]


class Ledger:
    """The items of one placement as a backend adds them, with each device's bytes read and
    parameters per decoded token (what the speed estimate's roofline reads)."""

    def __init__(self, machine: Machine) -> None:
        self.devs = devices_for(machine)
        self.gpus = [d for d in self.devs if d.is_gpu]
        self.host = self.devs[-1]
        self.by_id = {d.id: d for d in self.devs}
        self.items: list[LineItem] = []
        self.read: dict[int, float] = {d.id: 0.0 for d in self.devs}
        self.params: dict[int, float] = {d.id: 0.0 for d in self.devs}
        self.switches: dict[int, int] = {d.id: 0 for d in self.devs}
        self.moe_layers: dict[int, int] = {d.id: 0 for d in self.devs}
        self.experts: dict[int, int] = {d.id: 0 for d in self.devs}
        self.expert_share = 1.0
        self.network: Network | None = None

    def add(self, kind: LineKind, device: int, n_bytes: int, detail: str = "") -> None:
        self.items.append(LineItem(kind, device, n_bytes, detail))

    def finish(self, s: Settings, draft: DraftSpec | None, draft_dev: Device, draft_bytes: int) -> Layout:
        """Calibration, then each device's use: one rule decides both the verdict and the headroom
        printed (a device is over when its headroom is negative; on a Mac the host's is the pool's)."""
        add_calibration(self, s)
        uses = device_uses(self.devs, self.items)
        over = {u.device.id: -u.headroom_bytes for u in uses if u.headroom_bytes < 0}
        link = self._links()
        loads = [DeviceLoad(d, int(self.read[d.id]), 2 * self.params[d.id], self.switches[d.id], self.moe_layers[d.id],
                            self.experts[d.id], self.expert_share, *link.get(d.id, (0.0, 0.0)))
                 for d in self.devs if self.read[d.id] > 0]
        return Layout(tuple(self.items), loads, draft_dev if draft is not None else None, draft_bytes, uses, over,
                      self.network)

    def _links(self) -> dict[int, tuple[float, float]]:
        """Each remote machine's network cost, carried by the first of its devices in the plan."""
        net = self.network
        if net is None:
            return {}
        per_token = {h.devices[0]: (net.hop_seconds(h, 1) - net.hop_seconds(h, 0)) for h in net.hops}
        return {h.devices[0]: (net.hop_seconds(h, 0), per_token[h.devices[0]]) for h in net.hops}


# --- layers on devices (llama.cpp and exllamav2) -----------------------------------------------


def assign_layers(model: ModelSpec, s: Settings, gpus: list[Device]) -> list[int]:
    """Device id of every layer, index n_layer being the output layer: the last n_gpu_layers of the
    n_layer + 1 slots go to the GPUs in order, layer_split[i] of them to GPU i (llama.cpp's -ngl and
    --tensor-split: src/llama-model.cpp, i_gpu_start = n_layer + 1 - n_gpu_layers, so -ngl 1 offloads
    the output layer alone; exllamav2's autosplit is the same with every layer)."""
    n = model.n_layer
    ngl = max(0, min(s.n_gpu_layers, n + 1))
    placement = [HOST] * (n + 1)
    if not gpus or ngl == 0:
        return placement
    split = list(s.layer_split) or [ngl]
    gpu_of = []
    for i, count in enumerate(split):
        gpu_of += [gpus[min(i, len(gpus) - 1)].id] * count
    for k, layer in enumerate(range(n + 1 - ngl, n + 1)):
        placement[layer] = gpu_of[min(k, len(gpu_of) - 1)]
    return placement


def cpu_moe_layers(model: ModelSpec, s: Settings) -> int:
    """How many leading layers keep their routed experts in RAM (llama.cpp --n-cpu-moe N)."""
    return 0 if not model.is_moe else max(0, min(s.n_cpu_moe or 0, model.n_layer))


def add_layers(led: Ledger, model: ModelSpec, s: Settings, placement: list[int]) -> int:
    """Weights, target KV and recurrent state per device for a layer placement; returns the output
    layer's device. With --n-cpu-moe N the routed experts of layers 0..N-1 stay on the host whatever
    device holds the rest of their layer (llama.cpp's tensor buffer override)."""
    groups = group_weights(model)
    n_cpu_moe = cpu_moe_layers(model, s)
    frac = active_fraction(model)
    led.expert_share = frac
    per_dev_w: dict[int, int] = {}
    per_dev_read: dict[int, float] = {}
    per_dev_kv: dict[int, int] = {}
    per_dev_rs: dict[int, int] = {}
    exps_host = 0

    def put(dev: int, n_bytes: int, read: float) -> None:
        per_dev_w[dev] = per_dev_w.get(dev, 0) + n_bytes
        per_dev_read[dev] = per_dev_read.get(dev, 0.0) + read

    for layer in range(model.n_layer):
        d = placement[layer]
        exps = groups.per_layer_exps[layer] if groups.per_layer_exps else 0
        dense = groups.per_layer[layer] - exps
        put(d, dense, dense)
        exp_dev = HOST if layer < n_cpu_moe else d
        led.moe_layers[d] += 1 if exps else 0  # the router runs with the layer
        put(exp_dev, exps, exps * frac)  # a token reads only its chosen experts
        led.experts[exp_dev] += exps
        if exp_dev == HOST and d != HOST:
            exps_host += exps
            led.switches[HOST] += 2  # to the CPU for the experts and back
        per_dev_kv[d] = per_dev_kv.get(d, 0) + mem.target_kv_layer_bytes(model, s, layer)
        per_dev_rs[d] = per_dev_rs.get(d, 0) + mem.recurrent_layer_bytes(model, s, layer)
    out_dev = placement[model.n_layer]
    # Tied models on the host read the one mmapped token_embd for both roles.
    out_bytes = groups.output if (out_dev != HOST or not groups.tied) else groups.output - groups.embd
    put(out_dev, out_bytes, out_bytes)
    put(HOST, groups.embd + groups.other, groups.other)  # one embedding row per token
    bpp = max(1e-9, bytes_per_param(model))
    for d in [*[g.id for g in led.gpus], HOST]:
        if per_dev_w.get(d):
            n_l = sum(1 for p in placement[: model.n_layer] if p == d)
            label = f"{n_l} layers" + (" + output" if out_dev == d else "") + (" + embeddings" if d == HOST else "")
            if d == HOST and exps_host:
                label += f" + experts of {n_cpu_moe} GPU layers (--n-cpu-moe {n_cpu_moe})"
            led.add(LineKind.WEIGHTS, d, per_dev_w[d], label)
            led.read[d] += per_dev_read[d]
            led.params[d] += per_dev_read[d] / bpp
        if per_dev_kv.get(d):
            seqs = f" x {s.n_seq} sequences" if s.n_seq > 1 else ""
            led.add(LineKind.TARGET_KV, d, per_dev_kv[d], f"{s.n_ctx} tokens{seqs}, K {s.type_k} / V {s.type_v}" + _kv_note(model, s))
            led.read[d] += per_dev_kv[d] / 2 / max(1, s.n_seq)  # the average position reads half of one sequence's cache
        if per_dev_rs.get(d):
            copies = mem.rollback_copies(model, s)
            led.add(LineKind.RECURRENT_STATE, d, per_dev_rs[d],
                    f"{len(model.recurrent_layers)} recurrent layers x {s.n_seq} sequence(s), f32"
                    + (f", x {copies} to give drafts back" if copies > 1 else ""))
            led.read[d] += per_dev_rs[d] / max(1, s.n_seq) / copies
    return out_dev


def _kv_note(model: ModelSpec, s: Settings) -> str:
    if model.is_mla:
        return f"; MLA latent {model.kv_lora_rank}+{model.qk_rope_head_dim} per token"
    if model.recurrent_layers:
        return f"; {model.n_layer - len(model.recurrent_layers)} attention layers"
    if model.sliding_window and model.swa_layers:
        return "; SWA layers full (--swa-full)" if s.swa_full else f"; {len(model.swa_layers)} SWA layers keep {model.sliding_window} + ubatch"
    return ""


def bytes_per_param(model: ModelSpec) -> float:
    g = group_weights(model)
    b = sum(g.per_layer) + g.embd + g.output + g.other - (g.embd if g.tied else 0)
    return b / g.n_params if g.n_params else 2.0


def used_gpus(placement: list[int]) -> list[int]:
    return sorted({p for p in placement if p != HOST})


# --- the draft, and calibration ----------------------------------------------------------------


def add_draft(led: Ledger, model: ModelSpec, draft: DraftSpec | None, s: Settings, draft_dev: Device, *,
              scratch_device: int, embeddings_copy: bool) -> int:
    """The draft's weights, KV and scratch; returns the bytes one drafting step reads (its weights, or
    an MoE MTP layer's chosen experts) for the speed estimate.

    `scratch_device`: where the verified tree's logits and features land (llama.cpp copies them to
    the host); `embeddings_copy`: whether homespec keeps an fp16 copy of the target's token
    embeddings for the head (it does unless the backend shares its own table)."""
    if draft is None:
        return 0
    on_gpu = draft_dev.is_gpu
    draft_bytes = mem.draft_weight_bytes(draft, on_gpu)
    led.add(LineKind.DRAFT_WEIGHTS, draft_dev.id, draft_bytes, _draft_detail(draft))
    led.add(LineKind.DRAFT_KV, draft_dev.id, mem.draft_kv_bytes(draft, s, on_gpu), f"{s.n_ctx} tokens x {draft.n_layer} layer(s)")
    if draft.kind not in ("model", "mtp"):
        led.add(LineKind.TREE_SCRATCH, scratch_device, mem.tree_scratch_bytes(model, draft, s),
                f"{s.tree_tokens}-node tree: logits + features")
        if embeddings_copy:
            # The head reads the target's token embeddings; homespec keeps an fp16 copy on the host.
            led.add(LineKind.DRAFT_EMBEDDINGS, HOST, model.n_vocab * model.n_embd * 2, "fp16 copy of token_embd")
    else:
        led.add(LineKind.TREE_SCRATCH, HOST, (s.draft_depth + 1) * model.n_vocab * 4, "logits of the verified chain")
    return draft.read_bytes if draft.read_bytes is not None else draft_bytes


def add_llamacpp_head(led: Ledger, model: ModelSpec, draft: DraftSpec, s: Settings, draft_dev: Device) -> int:
    """An EAGLE head run by llama.cpp beside its target (backends/llamacpp/head.py): an eagle3 GGUF in
    f16 on the target's device, with a context of its own (KV, compute buffer; its output buffer in
    host memory) sized for s.n_seq lanes; it reads the target's token embeddings in place, so nothing is
    copied. -> the bytes one drafting step reads."""
    lanes = max(1, s.n_seq)
    weights = mem.head_gguf_bytes(draft, s.draft_dtype)
    cells = mem.head_cells(s.n_ctx, draft.window, mem.HEAD_SINKS if draft.window else 0,
                           max(s.draft_depth, MAX_DEPTH), s.draft_topk)
    led.add(LineKind.DRAFT_WEIGHTS, draft_dev.id, weights, _draft_detail(draft) + ", eagle3 GGUF in llama.cpp")
    led.add(LineKind.DRAFT_KV, draft_dev.id, mem.head_kv_bytes(draft, lanes, cells),
            f"{lanes} lane(s) x {cells} cells" + (f" (window {draft.window})" if draft.window else ""))
    led.add(LineKind.DRAFT_COMPUTE, draft_dev.id, mem.head_compute_bytes(draft, lanes, cells, s.draft_topk),
            f"ubatch {mem.head_ubatch(lanes, s.draft_topk)}")
    led.add(LineKind.DRAFT_OUTPUT, HOST, mem.head_output_bytes(draft, lanes, s.draft_topk, model.n_vocab),
            f"{mem.head_seq_ids(lanes, s.draft_topk)} sequence ids")
    led.add(LineKind.TREE_SCRATCH, HOST, mem.tree_scratch_bytes(model, draft, s), f"{s.tree_tokens}-node tree: logits + features")
    return draft.read_bytes if draft.read_bytes is not None else weights


def add_llamacpp_mtp(led: Ledger, model: ModelSpec, draft: DraftSpec, s: Settings, draft_dev: Device) -> int:
    """The target's own MTP layers run by llama.cpp beside it (backends/llamacpp/mtp.py): their tensors
    (loaded with the model), a context of their own sized like an EAGLE head's for s.n_seq lanes (KV of
    the MTP layers in the target's KV types, a compute buffer whose peak is the logits of a ubatch over
    the whole vocabulary, an output buffer on the host). -> the bytes one drafting step reads."""
    lanes = max(1, s.n_seq)
    cells = mem.head_cells(s.n_ctx, None, 0, max(s.draft_depth, MAX_DEPTH), s.draft_topk)
    led.add(LineKind.DRAFT_WEIGHTS, draft_dev.id, mem.draft_weight_bytes(draft, draft_dev.is_gpu), _draft_detail(draft))
    led.add(LineKind.DRAFT_KV, draft_dev.id, mem.mtp_kv_bytes(draft, s, lanes, cells), f"{lanes} lane(s) x {cells} cells")
    led.add(LineKind.DRAFT_COMPUTE, draft_dev.id, mem.head_compute_bytes(draft, lanes, cells, s.draft_topk),
            f"ubatch {mem.head_ubatch(lanes, s.draft_topk)}")
    led.add(LineKind.DRAFT_OUTPUT, HOST, mem.mtp_output_bytes(draft, lanes, s.draft_topk),
            f"{mem.head_seq_ids(lanes, s.draft_topk)} sequence ids")
    led.add(LineKind.TREE_SCRATCH, HOST, (s.tree_tokens + 1) * model.n_vocab * 4 * lanes, "logits of the verified draft")
    return draft.read_bytes if draft.read_bytes is not None else draft.weight_bytes


def _draft_detail(d: DraftSpec) -> str:
    if d.kind == "model":
        return f"draft model {d.name}"
    if d.kind == "mtp":
        return f"{d.n_layer} MTP layer(s) of the target (llama.cpp --spec-type draft-mtp)"
    return f"{d.kind} head, draft vocab {d.draft_vocab:,}"


def add_calibration(led: Ledger, s: Settings) -> None:
    """--calibrate: what this machine measured beyond the model, per device in proportion to its items."""
    if s.memory_scale <= 1.0:
        return
    totals: dict[int, int] = {}
    for it in led.items:
        totals[it.device] = totals.get(it.device, 0) + it.bytes
    for dev_id, subtotal in totals.items():
        extra = int(subtotal * (s.memory_scale - 1.0))
        led.add(LineKind.CALIBRATION, dev_id, extra, f"measured/planned = {s.memory_scale:.3f}")

"""llama.cpp's placement (llama-model.cpp, load_tensors): with -ngl L the last L of the n_layer + 1
slots go to the GPUs, the output layer (the last slot) first, then the repeating layers from the
last down; the input embedding always stays on the host ("very little benefit to offloading the
input layer"). The solver binary searches
the largest L whose GPU side fits; what is left runs on the CPU from RAM."""

from __future__ import annotations

from homespec.plan import cpu_buffers as cpu, memory as mem
from homespec.plan.devices import HOST, Device, devices_for
from homespec.plan.lines import LineItem, LineKind
from homespec.plan.network import DEFAULT_LINK, Network, hops, link_from_arg
from homespec.plan.place.ledger import (Layout, Ledger, Placement, add_draft, add_layers, add_llamacpp_head,
                                        add_llamacpp_mtp, assign_layers, cpu_moe_layers, used_gpus)
from homespec.plan.settings import Settings
from homespec.quant.weights import group_weights, is_expert_tensor
from homespec.types import DraftSpec, Machine, ModelSpec, TensorInfo

MIB = 1 << 20


def layout(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> Layout:
    """The line items of s.n_gpu_layers layers on the GPUs (s.layer_split of them on each)."""
    led = Ledger(machine)
    placement = assign_layers(model, s, led.gpus)
    led.network = _network(led, model, machine, placement)
    out_dev = add_layers(led, model, s, placement)
    _add_cpu_buffers(led, model, machine, s, placement)
    on_gpus = used_gpus(placement)
    for d in on_gpus or [HOST]:
        led.add(LineKind.COMPUTE, d, mem.llamacpp_compute_bytes(model, s, d == out_dev, _kernels(led.by_id[d])),
                f"ubatch {s.n_ubatch}, flash attention {'on' if s.flash_attn else 'off'}")
    # llama.cpp's output buffer: the logits of n_seq_max rows, in host memory (the output device's host
    # buffer type, else the CPU's) from the context's creation (llama-context.cpp, output_reserve).
    led.add(LineKind.OUTPUT_BUFFER, HOST, model.n_vocab * max(1, s.n_seq) * 4,
            f"logits of {max(1, s.n_seq)} sequence(s), f32")
    if on_gpus and out_dev != HOST:
        # The host still runs the input embedding and receives the logits.
        host_compute = min(s.n_ubatch, s.n_batch) * model.n_embd * 4 * 2
        led.add(LineKind.COMPUTE, HOST, host_compute, "input embeddings of one ubatch")
    for g in led.gpus:
        if g.id in on_gpus:
            led.add(LineKind.RESERVE, g.id, _reserve(g), "CUDA context + driver" if g.vendor == "nvidia" else "backend runtime")
    draft_dev = _draft_device(led, on_gpus, out_dev)
    if draft is not None and draft.kind in ("eagle3", "eagle3.1"):
        draft_bytes = add_llamacpp_head(led, model, draft, s, draft_dev)
    elif draft is not None and draft.kind == "mtp":
        draft_bytes = add_llamacpp_mtp(led, model, draft, s, draft_dev)
    else:
        draft_bytes = add_draft(led, model, draft, s, draft_dev, scratch_device=HOST, embeddings_copy=False)
    if s.cache_ram_bytes:  # serve --cache-ram: a budget the server fills with idle conversations' states
        led.add(LineKind.PROMPT_CACHE, HOST, s.cache_ram_bytes, "--cache-ram: idle conversations' KV in host RAM")
    return led.finish(s, draft, draft_dev, draft_bytes)


def _add_cpu_buffers(led: Ledger, model: ModelSpec, machine: Machine, s: Settings, placement: list[int]) -> None:
    """The host's weights as the buffers llama.cpp allocates (docs/planner.md, "Weights in RAM"): the mmapped
    file's span (`CPU_Mapped`), and the copies it makes for its fastest CPU kernels (`CPU_REPACK`, `AMX`)."""
    if not model.tensors:
        return
    build = cpu_build(machine, s)
    n_cpu_moe = cpu_moe_layers(model, s)
    on_host = [_tensor_on_host(t, model, placement, n_cpu_moe) for t in model.tensors]
    tied_out = group_weights(model).tied and placement[model.n_layer] == HOST
    dup = tuple(t for t in model.tensors if t.name == "token_embd.weight") if tied_out else ()
    hw = cpu.host_weights(model.tensors, on_host, build, dup)
    k = next((i for i, it in enumerate(led.items) if it.kind == LineKind.WEIGHTS and it.device == HOST), None)
    if k is None or (not hw.repack and not hw.amx and hw.mapped <= led.items[k].bytes):
        return  # the file's bytes once, as the ledger has them
    it = led.items[k]
    gap = hw.mapped - hw.in_file
    span = f" (the file's span: {gap / MIB:,.1f} MiB of it held in other buffers)" if gap > 0 else ""
    led.items[k] = LineItem(LineKind.WEIGHTS, HOST, hw.mapped, f"{cpu.MAPPED}: {it.detail}{span}")
    if hw.repack:
        led.add(LineKind.WEIGHTS_CPU_REPACK, HOST, hw.repack,
                f"{cpu.REPACK}: {'/'.join(hw.repack_types)} weights interleaved for the CPU kernels (a second copy)")
    if hw.amx:
        led.add(LineKind.WEIGHTS_AMX, HOST, hw.amx, f"{cpu.AMX}: {'/'.join(hw.amx_types)} weights packed for AMX tiles")


def _tensor_on_host(t: TensorInfo, model: ModelSpec, placement: list[int], n_cpu_moe: int) -> bool:
    """Whether llama.cpp keeps tensor `t` on the CPU: its layer's device, the output layer's, the input
    embedding always; routed experts of the first n_cpu_moe layers; MTP layers are not loaded."""
    if t.layer is not None:
        if t.layer >= model.n_layer:
            return False
        return placement[t.layer] == HOST or (t.layer < n_cpu_moe and is_expert_tensor(t.name))
    if t.name.startswith("output"):
        return placement[model.n_layer] == HOST
    return True


def cpu_build(machine: Machine, s: Settings) -> cpu.CpuBuild:
    """What llama.cpp's CPU backend does with weights on this machine: a CUDA or HIP GPU's host buffer
    type takes them first (nothing repacked); else the CPU's instruction sets and the build's extra buffers."""
    host_buffer = any(g.vendor in ("nvidia", "amd") for g in machine.gpus)
    return cpu.CpuBuild(machine.cpu_features, s.cpu_buffers, host_buffer)


def _network(led: Ledger, model: ModelSpec, machine: Machine, placement: list[int]) -> Network | None:
    """The links a forward crosses when layers sit on other machines' GPUs (homespec.plan.network)."""
    remote_of = {g.id: g.remote for g in led.gpus if g.remote}
    if not remote_of:
        return None
    found = hops(placement, remote_of, model.n_embd, model.n_vocab)
    return Network(link_from_arg(machine.link or DEFAULT_LINK), model.n_embd, found) if found else None


def _draft_device(led: Ledger, on_gpus: list[int], out_dev: int) -> Device:
    """The draft runs on the first GPU holding layers; over several machines it stays on the main host,
    beside the target's output layer (llama-server loads the draft on its own devices)."""
    if not on_gpus:
        return led.host
    if led.network is None:
        return led.by_id[on_gpus[0]]
    local = [g for g in on_gpus if not led.by_id[g].remote]
    if out_dev in local:
        return led.by_id[out_dev]
    return led.by_id[local[0]] if local else led.host


def _kernels(d: Device) -> str:
    """The ggml backend that runs a device's graph: "cuda" (NVIDIA, and AMD through HIP), "metal", "cpu"."""
    return {"nvidia": "cuda", "amd": "cuda", "apple": "metal"}.get(d.vendor, "cpu")


def _reserve(g: Device) -> int:
    return mem.APPLE_RESERVE if g.vendor == "apple" else mem.CUDA_RESERVE


def split_layers(model: ModelSpec, machine: Machine, s: Settings, ngl: int) -> Settings:
    """Spread ngl GPU layers over the GPUs (--tensor-split) in proportion to each one's capacity
    less its reserve."""
    gpus = [d for d in devices_for(machine) if d.is_gpu]
    if len(gpus) <= 1:
        return s.with_(n_gpu_layers=ngl, layer_split=(ngl,) if gpus else ())
    n_slots = min(ngl, model.n_layer + 1)
    free = [max(1, g.capacity_bytes - mem.CUDA_RESERVE) for g in gpus]
    total = sum(free)
    split = [int(n_slots * f / total) for f in free]
    i = 0
    while sum(split) < n_slots:  # hand out the rounding remainder largest-first
        split[sorted(range(len(gpus)), key=lambda k: -free[k])[i % len(gpus)]] += 1
        i += 1
    return s.with_(n_gpu_layers=ngl, layer_split=tuple(split))


def place(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> Placement:
    """The most GPU layers whose GPU side fits (binary search over 0..n_layer + 1).

    An MoE model without a fixed --n-cpu-moe is searched the way home setups run it: everything on
    the GPUs; else the fewest leading layers whose routed experts stay in RAM (--n-cpu-moe N, N =
    1..n_layer) with every layer's attention, shared expert and KV on the GPUs; else whole layers
    offloaded with every expert in RAM. A fixed --n-cpu-moe N keeps N and searches -ngl only."""
    n = model.n_layer
    if not machine.gpus:
        s2 = s.with_(n_gpu_layers=0, layer_split=(), n_cpu_moe=s.n_cpu_moe or 0)
        return Placement(s2, layout(model, draft, machine, s2), 0)

    def gpu_ok(ngl: int, n_cpu_moe: int) -> tuple[Settings, Layout, bool]:
        s2 = split_layers(model, machine, s.with_(n_cpu_moe=n_cpu_moe), ngl)
        lay = layout(model, draft, machine, s2)
        return s2, lay, not any(k != HOST for k in lay.over)

    if model.is_moe and s.n_cpu_moe is None:
        whole = gpu_ok(n + 1, 0)
        if whole[2]:
            return _placement(whole, n)
        least = _search(lambda k: gpu_ok(n + 1, k), 1, n, want_largest=False)
        if least is not None:
            return _placement(least, n)
        return _placement(_most_layers(lambda ngl: gpu_ok(ngl, n), n), n)
    return _placement(_most_layers(lambda ngl: gpu_ok(ngl, s.n_cpu_moe or 0), n), n)


def _most_layers(try_ngl, n: int):
    """The largest -ngl in 0..n + 1 whose GPU side fits (0 when none does)."""
    return _search(try_ngl, 1, n + 1, want_largest=True) or try_ngl(0)


def _search(attempt, lo: int, hi: int, *, want_largest: bool):
    """Binary search over a monotone fit: the largest (or smallest) k in lo..hi whose attempt fits."""
    best = None
    while lo <= hi:
        mid = (lo + hi) // 2
        cand = attempt(mid)
        if cand[2]:
            best = cand
            if want_largest:
                lo = mid + 1
            else:
                hi = mid - 1
        elif want_largest:
            hi = mid - 1
        else:
            lo = mid + 1
    return best


def _placement(found, n: int) -> Placement:
    s2, lay, _ = found
    # -ngl L holds the output layer and the last L - 1 repeating layers (i_gpu_start = n_layer + 1 - L)
    ngl = min(s2.n_gpu_layers, n + 1)
    return Placement(s2, lay, n - max(0, ngl - 1), output_on_host=ngl == 0)

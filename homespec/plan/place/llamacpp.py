"""llama.cpp's placement (llama-model.cpp, load_tensors): with -ngl L the *last* L repeating layers
go to the GPUs; the output layer goes to a GPU only when L > n_layer; the input embedding always
stays on the host ("very little benefit to offloading the input layer"). The solver binary searches
the largest L whose GPU side fits; what is left runs on the CPU from RAM."""

from __future__ import annotations

from homespec.plan import memory as mem
from homespec.plan.devices import Device, devices_for
from homespec.plan.place.ledger import Layout, Ledger, Placement, add_draft, add_layers, assign_layers, used_gpus
from homespec.plan.settings import Settings
from homespec.types import DraftSpec, Machine, ModelSpec


def layout(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> Layout:
    """The line items of s.n_gpu_layers layers on the GPUs (s.layer_split of them on each)."""
    led = Ledger(machine)
    placement = assign_layers(model, s, led.gpus)
    out_dev = add_layers(led, model, s, placement)
    _add_repack(led, model, placement)
    on_gpus = used_gpus(placement)
    for d in on_gpus or ["host"]:
        led.add("compute", d, mem.llamacpp_compute_bytes(model, s, d == out_dev),
                f"ubatch {s.n_ubatch}, flash attention {'on' if s.flash_attn else 'off'}")
    if on_gpus and out_dev != "host":
        # The host still runs the input embedding and receives the logits.
        host_compute = min(s.n_ubatch, s.n_batch) * model.n_embd * 4 * 2
        led.add("compute", "host", host_compute, "input embeddings of one ubatch")
    for g in led.gpus:
        if g.id in on_gpus:
            led.add("reserve", g.id, _reserve(g), "CUDA context + driver" if g.vendor == "nvidia" else "backend runtime")
    draft_dev = led.by_id[on_gpus[0]] if on_gpus else led.host
    draft_bytes = add_draft(led, model, draft, s, draft_dev, scratch_device="host", embeddings_copy=True)
    return led.finish(s, draft, draft_dev, draft_bytes)


def _add_repack(led: Ledger, model: ModelSpec, placement: list[str]) -> None:
    """The CPU backend's interleaved copy of Q4_0/Q4_K/IQ4_NL host layers (docs/planner.md, "CPU repack")."""
    repack = mem.cpu_repack_bytes(model, {i for i in range(model.n_layer) if placement[i] == "host"})
    if not repack:
        return
    # The repacked copy replaces those tensors' mmapped pages (clean page cache, reclaimable
    # after load), so the host needs the file's bytes once: move them to their own line.
    for i, it in enumerate(led.items):
        if it.name == "weights" and it.device == "host":
            led.items[i] = mem.LineItem("weights", "host", it.bytes - repack, it.detail + " (mmapped)")
    led.add("weights (CPU repack)", "host", repack, "Q4_0/Q4_K/IQ4_NL layers interleaved for the CPU kernels")


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
        return s2, lay, not any(k != "host" for k in lay.over)

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
    return Placement(s2, lay, n - min(n, s2.n_gpu_layers), output_on_host=s2.n_gpu_layers <= n)

"""The memory pools a plan fills: each GPU, and the host's RAM."""

from __future__ import annotations

from dataclasses import dataclass

from homespec.types import GPU, Machine

GIB = 1 << 30
MIB = 1 << 20

# macOS lets Metal wire about 2/3 of RAM on Macs with up to 36 GB and about 3/4 above that
# (Apple's recommendedMaxWorkingSetSize; llama.cpp logs it at start-up as "recommendedMaxWorkingSetSize").
# `sudo sysctl iogpu.wired_limit_mb=N` raises it; a probed Mac reports the limit in force.
APPLE_SMALL_MAC_BYTES = 36 * 10**9
APPLE_SMALL_SHARE = 2 / 3
APPLE_LARGE_SHARE = 3 / 4

# Strix Halo on Linux: the GPU reaches system RAM through GTT, whose size amdgpu and TTM default to
# half of the RAM the OS sees, at least 3 GiB (kernel commit f7ba887f606b, "drm/amdgpu: Adjust logic
# around GTT size", 2022; TTM's pages_limit defaults to half as well). The BIOS carve-out (UMA frame
# buffer) is taken as its minimum, as Strix Halo LLM setups set it (docs/planner.md);
# `ttm.pages_limit=N` on the kernel command line or `amd-ttm --set <GB>` raises the limit.
AMD_GTT_SHARE = 1 / 2
AMD_GTT_FLOOR = 3 * GIB
AMD_GTT_HINT = "raise the GPU's GTT limit (ttm.pages_limit=N on the kernel command line, or amd-ttm --set <GB>)"

# What the OS and other programs keep of the host's RAM: 10 % with a 2 GiB floor (a desktop
# session plus a browser; users with a headless box can pass --ram to say more is free).
HOST_OS_SHARE = 0.10
HOST_OS_FLOOR = 2 * GIB

# Host memory bandwidth assumed for offloaded layers when nothing better is known: dual-channel
# DDR5-5600 (2 x 64 bit x 5600 MT/s = 89.6 GB/s); typical home-lab desktops are DDR4-3200 (51 GB/s)
# to DDR5-6000 (96 GB/s).
DEFAULT_HOST_BANDWIDTH_GBS = 89.6
# One core streams roughly 10-15 GB/s from DRAM, so a machine with few cores cannot use all of
# its channels' bandwidth (measured here: SmolLM2-135M Q4_1 decodes at 88 tok/s on 2 threads,
# about 14 GB/s of weights). A planned (catalogue) machine is assumed to be a typical desktop.
PER_CORE_BANDWIDTH_GBS = 12.0
ASSUMED_DESKTOP_CORES = 8

# A device id is an int: GPU i of the machine is i (llama.cpp's device order, --tensor-split's
# position), the host's RAM is HOST. The names a user reads ("gpu0", "host") are made only where a
# plan is printed (device_label).
HOST = -1


def device_label(dev: int) -> str:
    """How a plan names a device in its table, its JSON and its messages."""
    return "host" if dev == HOST else f"gpu{dev}"


def host_cores(machine: Machine) -> int:
    if machine.source == "catalogue":
        return max(machine.cpu_cores, ASSUMED_DESKTOP_CORES)
    return machine.cpu_cores or ASSUMED_DESKTOP_CORES


@dataclass(frozen=True, slots=True)
class Device:
    id: int  # the GPU's index, or HOST
    name: str
    capacity_bytes: int  # what the plan may fill
    bandwidth_gbs: float
    vendor: str  # "nvidia" | "apple" | "amd" | "host"
    fp16_tflops: float | None = None
    unified: bool = False  # shares the machine's RAM (Apple Silicon, Strix Halo, DGX Spark); the host too
    limit: str = ""  # what sets a unified GPU's capacity ("Metal working set", ...)
    remote: str = ""  # the other machine ("host[:port]") whose ggml-rpc-server serves this GPU; "" = this one

    @property
    def is_gpu(self) -> bool:
        return self.id != HOST

    @property
    def label(self) -> str:
        return device_label(self.id)


def apple_working_set(ram_bytes: int) -> int:
    share = APPLE_SMALL_SHARE if ram_bytes <= APPLE_SMALL_MAC_BYTES else APPLE_LARGE_SHARE
    return int(ram_bytes * share)


def host_usable(ram_bytes: int) -> int:
    return max(0, ram_bytes - max(HOST_OS_FLOOR, int(ram_bytes * HOST_OS_SHARE)))


def gpu_capacity(gpu: GPU) -> int:
    """Bytes a plan may use on this GPU.

    A probed GPU reports what is free now (other programs' memory excluded); a catalogue GPU is
    assumed empty. Apple GPUs are capped by Metal's working-set limit, Strix Halo by the GTT default;
    a unified NVIDIA GPU (DGX Spark) by nothing but the pool (devices_for caps every unified GPU at it).
    """
    if gpu.vendor == "apple":
        if gpu.source == "sysctl":
            return gpu.total_bytes  # the probe already reports the wired limit in force
        return apple_working_set(gpu.total_bytes)
    if gpu.unified and gpu.vendor == "amd" and gpu.source == "catalogue":
        return amd_gtt_limit(gpu.total_bytes)
    if gpu.free_bytes is not None and gpu.source == "nvml":
        return gpu.free_bytes
    return gpu.total_bytes


def amd_gtt_limit(ram_bytes: int) -> int:
    return max(AMD_GTT_FLOOR, int(ram_bytes * AMD_GTT_SHARE))


def unified_limit(gpu: GPU) -> str:
    """What caps a unified GPU's share of the pool, as the plan's table says it."""
    if gpu.vendor == "apple":
        return "Metal working set"
    if gpu.vendor == "amd":
        return "amdgpu GTT, half of RAM by default"
    # ggml-cuda reports /proc/meminfo's MemAvailable as the free memory of an integrated GPU
    # (ggml_backend_cuda_get_available_uma_memory, llama.cpp PR #17368)
    return "the pool: CUDA allocates from RAM"


def _capacity(g: GPU, pool: int) -> int:
    """A unified GPU of this machine shares its pool; a remote one (an RPC server's Mac) its own machine's."""
    if not g.unified:
        return gpu_capacity(g)
    return min(gpu_capacity(g), host_usable(g.total_bytes) if g.remote else pool)


def devices_for(machine: Machine) -> tuple[Device, ...]:
    """GPUs first (gpu0..), then the host.

    On a unified-memory machine (Apple Silicon, Strix Halo, DGX Spark) the two are one pool: the
    host's capacity is the RAM the OS leaves, and the GPU's is its share of that same RAM (the Metal
    working set, the GTT limit, or the whole pool), never more than the pool. The solver counts the
    GPU's use against the host's pool too (plan.place.ledger.device_uses)."""
    pool = host_usable(machine.ram_bytes)
    out = [
        Device(
            id=i,
            name=f"{g.name} @{g.remote}" if g.remote else g.name,
            capacity_bytes=_capacity(g, pool),
            bandwidth_gbs=g.bandwidth_gbs or DEFAULT_HOST_BANDWIDTH_GBS,
            vendor=g.vendor,
            fp16_tflops=g.fp16_tflops,
            unified=g.unified and not g.remote,
            limit=unified_limit(g) if g.unified else "",
            remote=g.remote,
        )
        for i, g in enumerate(machine.gpus)
    ]
    unified = any(g.unified and not g.remote for g in machine.gpus)
    host_bw = machine.ram_bandwidth_gbs or (
        next(d.bandwidth_gbs for d in out if d.unified) if unified else min(DEFAULT_HOST_BANDWIDTH_GBS, PER_CORE_BANDWIDTH_GBS * host_cores(machine))
    )
    out.append(
        Device(
            id=HOST,
            name=f"RAM{' (unified)' if unified else ''}",
            capacity_bytes=pool,
            bandwidth_gbs=host_bw,
            vendor="host",
            unified=unified,
        )
    )
    return tuple(out)

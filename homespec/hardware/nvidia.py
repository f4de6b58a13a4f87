"""NVIDIA GPUs through NVML (the nvidia-ml-py package, imported as `pynvml`).

Reading and interpreting are separate: `read_nvml()` collects raw numbers from the driver,
`gpus_from_nvml()` turns them into GPU specs. Tests feed the second one recorded readings.
"""

from __future__ import annotations

from dataclasses import dataclass

from homespec.types import GPU

# NVML reports the memory clock such that peak bandwidth = bus bytes x clock x 2 (data moves on
# both clock edges as NVML counts it), for GDDR6X and HBM alike. Checks against published figures:
#   RTX 4090: 384-bit, 10501 MHz -> 48 B x 10.501e9 x 2 = 1008 GB/s (NVIDIA spec: 1008 GB/s)
#   RTX 3090: 384-bit,  9751 MHz -> 936 GB/s (spec: 936 GB/s)
#   A100 40GB: 5120-bit, 1215 MHz -> 1555 GB/s (spec: 1555 GB/s)
# (the same arithmetic nvidia-smi users apply; docs/probe.md has the worked example).
DDR_FACTOR = 2


@dataclass(frozen=True, slots=True)
class NvmlReading:
    """What NVML says about one device (all raw: bytes, bits, MHz)."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    bus_width_bits: int | None
    max_mem_clock_mhz: int | None
    compute_capability: tuple[int, int] | None
    driver: str | None


def bandwidth_gbs(bus_width_bits: int | None, mem_clock_mhz: int | None) -> float | None:
    """Peak memory bandwidth in GB/s (1e9 bytes/s) from NVML's bus width and max memory clock."""
    if not bus_width_bits or not mem_clock_mhz:
        return None
    return bus_width_bits / 8 * mem_clock_mhz * 1e6 * DDR_FACTOR / 1e9


def gpus_from_nvml(readings: tuple[NvmlReading, ...] | list[NvmlReading]) -> tuple[GPU, ...]:
    return tuple(
        GPU(
            name=r.name,
            vendor="nvidia",
            total_bytes=int(r.total_bytes),
            free_bytes=int(r.free_bytes),
            bandwidth_gbs=bandwidth_gbs(r.bus_width_bits, r.max_mem_clock_mhz),
            index=r.index,
            compute_capability=f"{r.compute_capability[0]}.{r.compute_capability[1]}" if r.compute_capability else None,
            bus_width_bits=r.bus_width_bits,
            mem_clock_mhz=r.max_mem_clock_mhz,
            driver=r.driver,
            source="nvml",
        )
        for r in readings
    )


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_nvml() -> tuple[NvmlReading, ...]:
    """Raw readings for every NVIDIA GPU; () when there is no driver or no GPU (a normal result)."""
    try:
        import pynvml
    except ImportError:
        return ()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # NVMLError_LibraryNotFound on machines without the driver
        return ()
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        readings = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            readings.append(NvmlReading(
                index=i,
                name=_text(pynvml.nvmlDeviceGetName(h)),
                total_bytes=int(mem.total),
                free_bytes=int(mem.free),
                bus_width_bits=_optional(pynvml.nvmlDeviceGetMemoryBusWidth, h),
                max_mem_clock_mhz=_optional(pynvml.nvmlDeviceGetMaxClockInfo, h, pynvml.NVML_CLOCK_MEM),
                compute_capability=_optional(pynvml.nvmlDeviceGetCudaComputeCapability, h),
                driver=driver,
            ))
        return tuple(readings)
    except pynvml.NVMLError:
        return ()
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass


def _optional(fn, *args):
    """Some NVML queries are unsupported on some boards (vGPU, old drivers): None, not a failure."""
    import pynvml

    try:
        value = fn(*args)
    except pynvml.NVMLError:
        return None
    return tuple(int(v) for v in value) if isinstance(value, tuple) else int(value)

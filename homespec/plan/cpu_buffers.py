"""Which buffer llama.cpp's CPU backend puts each weight in, and how many bytes that buffer holds.

llama.cpp loads a weight that runs on the CPU into the first buffer type of its CPU list that can run
the weight's operation (src/llama-model-loader.cpp, `select_weight_buft`; the list is built by
`make_cpu_buft_list` in src/llama-model.cpp: a GPU's host buffer, the CPU's extra buffer types, the CPU):

* A GPU backend with a host buffer type (CUDA, HIP) comes first; with mmap llama.cpp then falls back to
  the plain CPU buffer ("avoid using a host buffer when using mmap"), so nothing is repacked.
* `AMX` (ggml-cpu/amx/amx.cpp `supports_op`, when the build has the AMX kernels and the CPU has AMX): 2-D
  matrix multiplications of Q4_0/Q4_1/Q8_0 (rows a multiple of 32), Q4_K/Q5_K/Q6_K/IQ4_XS (rows a multiple
  of 256) and F16 (of 16), with a multiple of 32 output rows; packed with a few extra bytes per block
  (amx/mmq.cpp `get_row_size`).
* `CPU_REPACK` (ggml-cpu/repack.cpp `ggml_repack_get_optimal_repack_type`): interleaved copies for the
  instruction sets named below, 2-D for matrix multiplications and 3-D for expert ones; same bytes.
* Everything else stays in the mmapped file (`CPU_Mapped`): one buffer spanning the file from the first
  to the last such tensor, so tensors between them that live elsewhere count in its size too.

Pure: no llama_cpp; the CPU's instruction sets come from homespec.hardware.isa (Machine.cpu_features).
"""

from __future__ import annotations

from dataclasses import dataclass

from homespec.quant.tables import GGML_TYPES
from homespec.types import TensorInfo

MAPPED, REPACK, AMX = "CPU_Mapped", "CPU_REPACK", "AMX"
# How llama.cpp loads weights on the CPU (llama_model_params.use_extra_bufts and the build's AMX kernels).
CPU_BUFFERS = ("none", "repack", "amx")

# AMX: the row alignment each type needs (amx.cpp supports_op) and the bytes its packed layout adds per
# block (mmq.cpp get_row_size: an int32 compensation per Q8_0 block, 4 bytes per Q4_K / Q5_K block, 2 per
# IQ4_XS block).
AMX_ALIGN = {"Q4_0": 32, "Q4_1": 32, "Q8_0": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256, "IQ4_XS": 256, "F16": 16}
AMX_EXTRA = {"Q8_0": 4, "Q4_K": 4, "Q5_K": 4, "IQ4_XS": 2}
AMX_OUT_ROWS = 32  # TILE_N * 2: the output rows (ne[1]) must be a multiple of it

# CPU_REPACK: per weight type, (features the layout needs, ne[1] multiple) in llama.cpp's order of preference.
REPACK_RULES: dict[str, tuple[tuple[frozenset[str], int], ...]] = {
    "Q4_0": ((frozenset({"AVX2"}), 8), (frozenset({"NEON", "MATMUL_INT8"}), 4), (frozenset({"NEON", "DOTPROD"}), 4)),
    "Q4_K": ((frozenset({"AVX2"}), 8), (frozenset({"NEON", "MATMUL_INT8"}), 8), (frozenset({"NEON", "DOTPROD"}), 8)),
    "Q2_K": ((frozenset({"AVX512"}), 8),),
    "Q5_K": ((frozenset({"NEON", "MATMUL_INT8"}), 8), (frozenset({"NEON", "DOTPROD"}), 8)),
    "Q6_K": ((frozenset({"NEON", "MATMUL_INT8"}), 8), (frozenset({"NEON", "DOTPROD"}), 8)),
    "IQ4_NL": ((frozenset({"AVX2"}), 8), (frozenset({"NEON", "DOTPROD"}), 4)),
    "MXFP4": ((frozenset({"AVX2"}), 8), (frozenset({"NEON", "DOTPROD"}), 4)),
    "Q8_0": ((frozenset({"NEON", "MATMUL_INT8"}), 4), (frozenset({"NEON", "DOTPROD"}), 4)),
}


@dataclass(frozen=True, slots=True)
class CpuBuild:
    """What llama.cpp's CPU backend may do with a weight in RAM on the machine planned for."""

    features: frozenset[str]  # the CPU's instruction sets (llama.cpp's names)
    buffers: str = "repack"  # "none": use_extra_bufts off; "repack": no AMX kernels; "amx": both
    gpu_host_buffer: bool = False  # a CUDA/HIP GPU is loaded: its host buffer comes first, nothing is repacked

    @property
    def amx(self) -> bool:
        return self.buffers == "amx" and {"AMX_INT8", "AVX512_VNNI"} <= self.features

    @property
    def extra(self) -> bool:
        return self.buffers != "none" and not self.gpu_host_buffer


def weight_op(t: TensorInfo) -> str:
    """The operation llama.cpp tests a weight's buffer with: "mul_mat", "mul_mat_id" (experts), else "other"
    (the token embedding's row lookup, norms, biases, convolution kernels)."""
    name = t.name
    if name.startswith("token_embd") or not name.endswith(".weight") or "_norm" in name or "ssm_conv1d" in name:
        return "other"
    if len(t.shape) == 3 and "_exps." in name:
        return "mul_mat_id"
    return "mul_mat" if len(t.shape) == 2 else "other"


def amx_bytes(t: TensorInfo) -> int | None:
    """The AMX buffer's bytes for a weight it takes, else None."""
    align = AMX_ALIGN.get(t.ggml_type)
    if align is None or len(t.shape) != 2 or t.shape[0] % align or t.shape[1] % AMX_OUT_ROWS:
        return None
    if t.ggml_type == "F16":
        return t.n_bytes
    block, size = GGML_TYPES[t.ggml_type]
    return t.shape[1] * (t.shape[0] // block) * (size + AMX_EXTRA.get(t.ggml_type, 0))


def repacks(t: TensorInfo, features: frozenset[str], op: str) -> bool:
    if (op == "mul_mat" and len(t.shape) != 2) or (op == "mul_mat_id" and len(t.shape) != 3):
        return False
    rows = t.shape[1]
    return any(need <= features and rows % multiple == 0 for need, multiple in REPACK_RULES.get(t.ggml_type, ()))


def weight_buffer(t: TensorInfo, build: CpuBuild, op: str | None = None) -> tuple[str, int]:
    """(buffer, bytes in it) for a weight on the CPU: AMX first, then CPU_REPACK, else the mmapped file."""
    op = weight_op(t) if op is None else op
    if build.extra and op in ("mul_mat", "mul_mat_id"):
        if build.amx and op == "mul_mat":
            packed = amx_bytes(t)
            if packed is not None:
                return AMX, packed
        if repacks(t, build.features, op):
            return REPACK, t.n_bytes
    return MAPPED, t.n_bytes


@dataclass(frozen=True, slots=True)
class HostWeights:
    """The host's weight buffers as llama.cpp allocates them."""

    mapped: int  # CPU_Mapped: the file's span from the first to the last tensor left in it
    repack: int  # CPU_REPACK
    amx: int  # AMX
    in_file: int  # bytes of the host tensors left in the file (what a token reads from there)
    repack_types: tuple[str, ...] = ()
    amx_types: tuple[str, ...] = ()


def host_weights(tensors: tuple[TensorInfo, ...], on_host: list[bool], build: CpuBuild,
                 duplicated: tuple[TensorInfo, ...] = ()) -> HostWeights:
    """The buffers of the tensors on the host, `tensors` in file order with `on_host[i]` saying whether the
    i-th lives on the CPU. `duplicated`: a tied model's output, which llama.cpp loads as a second tensor over
    token_embd's data (TENSOR_DUPLICATED): it adds bytes only when it lands in an extra buffer."""
    repack = amx = in_file = 0
    first = last = None
    rtypes: set[str] = set()
    atypes: set[str] = set()
    for i, (t, host) in enumerate(zip(tensors, on_host)):
        if not host:
            continue
        buf, n = weight_buffer(t, build)
        if buf == MAPPED:
            first = i if first is None else first
            last, in_file = i, in_file + n
        elif buf == REPACK:
            repack, _ = repack + n, rtypes.add(t.ggml_type)
        else:
            amx, _ = amx + n, atypes.add(t.ggml_type)
    for t in duplicated:
        buf, n = weight_buffer(t, build, "mul_mat")
        if buf == REPACK:
            repack, _ = repack + n, rtypes.add(t.ggml_type)
        elif buf == AMX:
            amx, _ = amx + n, atypes.add(t.ggml_type)
    mapped = 0 if first is None else sum(t.n_bytes for t in tensors[first:last + 1])
    return HostWeights(mapped, repack, amx, in_file, tuple(sorted(rtypes)), tuple(sorted(atypes)))

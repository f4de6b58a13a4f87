"""The memory model and solver on hand-built specs: invariants, not snapshots."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from homespec.errors import UsageError
from homespec.plan import memory as mem
from homespec.plan.devices import HOST
from homespec.plan.fit import FITS, FITS_OFFLOADED, NO_FIT, solve
from homespec.plan.lines import LineKind
from homespec.plan.settings import Settings
from homespec.plan.suggest import advise
from homespec.types import GPU, DraftSpec, Machine, ModelSpec, TensorInfo

GIB = 1 << 30
MIB = 1 << 20


def f16_model(n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, n_vocab=128256, tied=False, bpw=2.0) -> ModelSpec:
    """A Llama-shaped spec whose tensors cost `bpw` bytes per weight (2.0 = f16, 0.5625 = Q4_K-ish)."""
    hd = n_embd // n_head
    # in the order llama-quantize writes a file: output and token_embd first, then the blocks
    tensors = [] if tied else [TensorInfo("output.weight", (n_embd, n_vocab), "F16", int(n_embd * n_vocab * bpw))]
    tensors += [TensorInfo("output_norm.weight", (n_embd,), "F32", n_embd * 4),
                TensorInfo("token_embd.weight", (n_embd, n_vocab), "F16", n_embd * n_vocab * 2)]
    for i in range(n_layer):
        for name, shape in (
            ("attn_q", (n_embd, n_head * hd)), ("attn_k", (n_embd, n_head_kv * hd)), ("attn_v", (n_embd, n_head_kv * hd)),
            ("attn_output", (n_head * hd, n_embd)), ("ffn_gate", (n_embd, n_ff)), ("ffn_up", (n_embd, n_ff)),
            ("ffn_down", (n_ff, n_embd)),
        ):
            n = shape[0] * shape[1]
            tensors.append(TensorInfo(f"blk.{i}.{name}.weight", shape, "F16", int(n * bpw), i))
        for name in ("attn_norm", "ffn_norm"):
            tensors.append(TensorInfo(f"blk.{i}.{name}.weight", (n_embd,), "F32", n_embd * 4, i))
    return ModelSpec(
        name="test-model", arch="llama", n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
        head_dim=hd, n_ff=n_ff, n_vocab=n_vocab, n_ctx_train=131072, tied_embeddings=tied, tensors=tuple(tensors),
        quant="F16", format="gguf",
    )


def head_for(model: ModelSpec) -> DraftSpec:
    h = model.n_embd
    weight = (3 * h * h + 2 * h * (model.n_head + 2 * model.n_head_kv) * model.head_dim + h * h + 3 * h * model.n_ff + h * 32000) * 2
    return DraftSpec(name="head", kind="eagle3", target="", n_layer=1, n_embd=h, n_head=model.n_head,
                     n_head_kv=model.n_head_kv, head_dim=model.head_dim, n_ff=model.n_ff, draft_vocab=32000,
                     target_vocab=model.n_vocab, target_hidden=h, weight_bytes=weight)


def gpu(name="RTX 4090", gib=24, bw=1008.0) -> GPU:
    return GPU(name=name, vendor="nvidia", total_bytes=gib * GIB, bandwidth_gbs=bw, fp16_tflops=165.0, source="catalogue")


def machine(*gpus: GPU, ram_gib=64) -> Machine:
    return Machine(gpus=tuple(gpus), ram_bytes=ram_gib * GIB, cpu_cores=8)


def test_kv_bytes_match_llamacpp_formula():
    # SmolLM2-135M: 30 layers x 3 KV heads x 64 dims; llama.cpp logs 11.25 MiB of f16 KV at n_ctx 512.
    m = f16_model(n_layer=30, n_embd=576, n_head=9, n_head_kv=3, n_ff=1536, n_vocab=49152, tied=True)
    s = Settings(n_ctx=512)
    assert sum(mem.target_kv_layer_bytes(m, s, i) for i in range(30)) == int(11.25 * MIB)
    q8 = sum(mem.target_kv_layer_bytes(m, s.with_(type_k="q8_0", type_v="q8_0"), i) for i in range(30))
    assert q8 * 64 == int(11.25 * MIB) * 34


def test_items_sum_to_device_totals_and_total():
    m = f16_model()
    p = advise(solve(m, head_for(m), machine(gpu()), Settings(n_ctx=8192)))
    assert sum(u.used_bytes for u in p.devices) == p.total_bytes
    for u in p.devices:
        assert u.used_bytes == sum(i.bytes for i in p.items if i.device == u.device.id)
    kinds = {i.kind for i in p.items}
    assert {LineKind.WEIGHTS, LineKind.DRAFT_WEIGHTS, LineKind.TARGET_KV, LineKind.DRAFT_KV, LineKind.COMPUTE, LineKind.TREE_SCRATCH, LineKind.RESERVE} <= kinds


def test_small_model_fits_entirely():
    m = f16_model(n_layer=16, n_embd=2048, n_head=32, n_head_kv=8, n_ff=8192)  # ~1.2B f16: 2.5 GB
    p = advise(solve(m, head_for(m), machine(gpu()), Settings(n_ctx=4096)))
    assert p.verdict == FITS
    assert p.settings.n_gpu_layers == m.n_layer + 1  # output layer too
    assert p.headroom_bytes > 0
    assert p.offloaded_layers == 0


def test_big_model_offloads_last_layers_stay_on_gpu():
    m = f16_model(n_layer=80, n_embd=8192, n_head=64, n_head_kv=8, n_ff=28672, bpw=0.5625)  # 70B at ~4.5 bpw
    p = advise(solve(m, head_for(m), machine(gpu(), ram_gib=128), Settings(n_ctx=8192)))
    assert p.verdict == FITS_OFFLOADED
    assert 0 < p.offloaded_layers < m.n_layer
    g = next(u for u in p.devices if u.device.id == 0)
    assert 0 <= g.headroom_bytes
    # one more layer on the GPU would not fit: the solver found the maximum
    from homespec.plan.place import llamacpp

    mach = machine(gpu(), ram_gib=128)
    s_more = llamacpp.split_layers(m, mach, p.settings, p.settings.n_gpu_layers + 1)
    assert 0 in llamacpp.layout(m, head_for(m), mach, s_more).over
    assert p.suggestions  # what would make it fit entirely


def test_too_big_for_ram_does_not_fit():
    m = f16_model(n_layer=80, n_embd=8192, n_head=64, n_head_kv=8, n_ff=28672)  # 70B f16: 140 GB
    p = advise(solve(m, None, machine(gpu(), ram_gib=64), Settings(n_ctx=4096)))
    assert p.verdict == NO_FIT
    assert p.headroom_bytes < 0


def test_two_gpus_split_layers_and_both_fit():
    m = f16_model(n_layer=80, n_embd=8192, n_head=64, n_head_kv=8, n_ff=28672, bpw=0.5625)
    p = advise(solve(m, head_for(m), machine(gpu(), gpu("RTX 3090", 24, 936.0), ram_gib=128), Settings(n_ctx=4096)))
    assert sum(p.settings.layer_split) == min(p.settings.n_gpu_layers, m.n_layer + 1)
    assert len(p.settings.layer_split) == 2 and all(n > 0 for n in p.settings.layer_split)
    for u in p.devices:
        if u.device.is_gpu:
            assert u.headroom_bytes >= 0


def test_cpu_only_machine_fits_in_ram():
    m = f16_model(n_layer=30, n_embd=576, n_head=9, n_head_kv=3, n_ff=1536, n_vocab=49152, tied=True)
    p = advise(solve(m, head_for(m), machine(ram_gib=16), Settings(n_ctx=2048)))
    assert p.verdict == FITS
    assert {i.device for i in p.items} == {HOST}
    assert p.estimate.plain_tokens_per_s > 0


def test_flash_attention_off_grows_compute_with_context():
    m = f16_model()
    on = mem.llamacpp_compute_bytes(m, Settings(n_ctx=32768, flash_attn=True), True)
    off = mem.llamacpp_compute_bytes(m, Settings(n_ctx=32768, flash_attn=False), True)
    assert off > 4 * on  # the n_ctx x n_ubatch x n_head score matrix


def test_quantised_v_cache_without_flash_attention_is_refused():
    m = f16_model()
    with pytest.raises(UsageError):
        advise(solve(m, None, machine(gpu()), Settings(type_k="q8_0", type_v="q8_0", flash_attn=False)))


@pytest.mark.parametrize("ctx", [0, -5, 10**9])
def test_absurd_context_is_a_usage_error(ctx):
    with pytest.raises(UsageError):
        advise(solve(f16_model(n_layer=2), None, machine(gpu()), Settings(n_ctx=ctx)))


def test_apple_unified_memory_counts_host_and_gpu_together():
    mac = GPU(name="Apple M3 Max", vendor="apple", total_bytes=36 * 10**9, bandwidth_gbs=300.0, unified=True,
              source="catalogue")
    m = f16_model(n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, n_ff=14336, bpw=0.5625)
    p = advise(solve(m, head_for(m), Machine(gpus=(mac,), ram_bytes=36 * 10**9, cpu_cores=12), Settings(n_ctx=8192)))
    g = next(u for u in p.devices if u.device.id == 0)
    assert g.device.capacity_bytes == int(36 * 10**9 * 2 / 3)
    assert p.verdict == FITS


def test_speculation_estimate_is_labelled_and_faster_on_gpu():
    m = f16_model(bpw=0.5625)
    p = advise(solve(m, head_for(m), machine(gpu()), Settings(n_ctx=4096)))
    e = p.estimate
    assert "estimate" in e.basis
    assert e.spec_tokens_per_s and e.spec_tokens_per_s > e.plain_tokens_per_s
    # 8B at ~4.5 bpw on a 4090: 1008 GB/s x 0.75 / ~4.6 GB = ~160 tok/s
    assert 100 < e.plain_tokens_per_s < 250


@hsettings(max_examples=40, deadline=None)
@given(ctx=st.integers(256, 131072), kv=st.sampled_from(["f16", "q8_0", "q4_0"]))
def test_more_context_never_needs_less_memory(ctx, kv):
    m = f16_model(n_layer=8, n_embd=1024, n_head=16, n_head_kv=4, n_ff=4096, n_vocab=32000)
    s = Settings(n_ctx=ctx, type_k=kv, type_v=kv)
    a = solve(m, head_for(m), machine(gpu()), s).total_bytes
    b = solve(m, head_for(m), machine(gpu()), s.with_(n_ctx=ctx + 256)).total_bytes
    assert b >= a


def test_torch_backend_holds_dequantised_weights_on_one_device():
    m = f16_model(n_layer=4, n_embd=512, n_head=8, n_head_kv=4, n_ff=1024, n_vocab=32000, bpw=0.5625)
    p = advise(solve(m, None, machine(gpu()), Settings(backend="torch", n_ctx=2048)))
    w = [i for i in p.items if i.kind == LineKind.WEIGHTS]
    assert len(w) == 1 and w[0].device == 0
    assert w[0].bytes == sum(t.n_elements for t in m.tensors) * 2
    replace(p.settings)  # settings stay a frozen value


# --- Apple Silicon: GPU and CPU share one pool of RAM ------------------------------------------


def mac(ram_gib: int, bw=819.0) -> Machine:
    chip = GPU(name=f"Apple M3 Ultra ({ram_gib} GB)", vendor="apple", total_bytes=ram_gib * GIB, bandwidth_gbs=bw,
               unified=True, fp16_tflops=28.0, source="catalogue")
    return Machine(gpus=(chip,), ram_bytes=ram_gib * GIB, cpu_cores=24, ram_bandwidth_gbs=bw, source="catalogue")


def _check_pool_invariants(p) -> None:
    gpu0 = next(u for u in p.devices if u.device.id == 0)
    host = next(u for u in p.devices if u.device.id == HOST)
    assert host.shared_bytes == gpu0.used_bytes  # the GPU's share is counted in the one pool
    assert host.headroom_bytes == host.device.capacity_bytes - gpu0.used_bytes - host.used_bytes
    assert gpu0.device.capacity_bytes <= host.device.capacity_bytes  # the wired limit is a share of the pool
    assert p.fits == (p.headroom_bytes >= 0)
    if p.fits:
        assert gpu0.used_bytes + host.used_bytes <= host.device.capacity_bytes
    assert sum(u.used_bytes for u in p.devices) == p.total_bytes == sum(i.bytes for i in p.items)


def test_a_mac_too_small_for_the_model_is_over_by_what_gpu_and_cpu_need_together():
    # 405B-shaped f16 (~760 GiB) on a 512 GiB Mac: the GPU holds its working set, the rest lands
    # on the CPU side of the same RAM, and the pool is over by the difference.
    m = f16_model(n_layer=126, n_embd=16384, n_head=128, n_head_kv=8, n_ff=53248)
    p = advise(solve(m, head_for(m), mac(512), Settings(n_ctx=8192)))
    _check_pool_invariants(p)
    gpu0, host = p.devices
    assert gpu0.headroom_bytes >= 0 and p.verdict == NO_FIT
    assert p.headroom_bytes == host.headroom_bytes < 0
    assert -p.headroom_bytes == p.total_bytes - host.device.capacity_bytes


@hsettings(max_examples=40, deadline=None)
@given(ram=st.sampled_from([16, 36, 64, 96, 192, 512]), n_layer=st.integers(8, 96), width=st.sampled_from([2048, 4096, 8192]),
       bpw=st.sampled_from([0.5625, 1.0, 2.0]), ctx=st.integers(1, 64).map(lambda k: k * 1024),
       with_head=st.booleans())
def test_unified_pool_invariants(ram, n_layer, width, bpw, ctx, with_head):
    m = f16_model(n_layer=n_layer, n_embd=width, n_head=width // 128, n_head_kv=8, n_ff=width * 3, n_vocab=32000, bpw=bpw)
    p = solve(m, head_for(m) if with_head else None, mac(ram), Settings(n_ctx=ctx))
    _check_pool_invariants(p)


# --- unified memory beyond Apple: Strix Halo (amdgpu GTT) and DGX Spark (the pool) ---------------


def unified_box(vendor: str, ram_gib: int = 128) -> Machine:
    bw = 256.0 if vendor == "amd" else 273.0
    chip = GPU(name=f"{vendor} unified ({ram_gib} GB)", vendor=vendor, total_bytes=ram_gib * GIB, bandwidth_gbs=bw,
               unified=True, source="catalogue")
    return Machine(gpus=(chip,), ram_bytes=ram_gib * GIB, cpu_cores=16, ram_bandwidth_gbs=bw, source="catalogue")


def test_strix_halo_gpu_gets_the_gtt_default_and_dgx_spark_the_pool():
    m = f16_model(n_layer=8, n_embd=1024, n_head=8, n_head_kv=8, n_ff=4096, n_vocab=32000, bpw=0.5625)
    amd = solve(m, None, unified_box("amd"), Settings(n_ctx=2048))
    nv = solve(m, None, unified_box("nvidia"), Settings(n_ctx=2048))
    pool = 128 * GIB - int(128 * GIB * 0.10)  # RAM less the OS's 10 %
    # amdgpu's default GTT is half of RAM; ggml-cuda gives an integrated GPU what the OS has available
    assert [u.device.capacity_bytes for u in amd.devices] == [64 * GIB, pool]
    assert [u.device.capacity_bytes for u in nv.devices] == [pool, pool]
    assert amd.unified and nv.unified and amd.verdict == nv.verdict == FITS


def test_a_model_over_the_gtt_limit_but_inside_the_pool_offloads_on_strix_halo():
    # 69e9 weights at 1.2 bytes: ~77 GiB, more than the 64 GiB GTT default, less than the 115 GiB pool
    m = f16_model(n_layer=80, n_embd=8192, n_head=64, n_head_kv=8, n_ff=28672, n_vocab=32000, bpw=1.2)
    amd = solve(m, None, unified_box("amd"), Settings(n_ctx=4096))
    nv = solve(m, None, unified_box("nvidia"), Settings(n_ctx=4096))
    _check_pool_invariants(amd)
    _check_pool_invariants(nv)
    assert amd.verdict == FITS_OFFLOADED and amd.offloaded_layers > 0
    assert nv.verdict == FITS and nv.offloaded_layers == 0


@hsettings(max_examples=30, deadline=None)
@given(vendor=st.sampled_from(["amd", "nvidia"]), ram=st.sampled_from([32, 64, 128]), n_layer=st.integers(8, 96),
       width=st.sampled_from([2048, 4096, 8192]), bpw=st.sampled_from([0.5625, 2.0]))
def test_unified_pool_invariants_beyond_apple(vendor, ram, n_layer, width, bpw):
    m = f16_model(n_layer=n_layer, n_embd=width, n_head=width // 128, n_head_kv=8, n_ff=width * 3, n_vocab=32000, bpw=bpw)
    _check_pool_invariants(solve(m, head_for(m), unified_box(vendor, ram), Settings(n_ctx=8192)))


@hsettings(max_examples=30, deadline=None)
@given(n_gpus=st.integers(0, 3), ram=st.sampled_from([8, 32, 128]), n_layer=st.integers(8, 96),
       width=st.sampled_from([2048, 4096, 8192]), bpw=st.sampled_from([0.5625, 2.0]))
def test_fits_is_headroom_at_least_zero_on_discrete_gpus(n_gpus, ram, n_layer, width, bpw):
    m = f16_model(n_layer=n_layer, n_embd=width, n_head=width // 128, n_head_kv=8, n_ff=width * 3, n_vocab=32000, bpw=bpw)
    p = solve(m, head_for(m), machine(*[gpu()] * n_gpus, ram_gib=ram), Settings(n_ctx=8192))
    assert p.fits == (p.headroom_bytes >= 0)
    assert all(u.shared_bytes == 0 for u in p.devices)
    assert sum(u.used_bytes for u in p.devices) == p.total_bytes

"""Expected decode speed: a memory-bandwidth roofline with a compute term for verification.

An estimate, and labelled as one. Decoding one token reads every weight on each device once,
plus the KV cache up to the current position, so its time is bytes / (bandwidth x efficiency).
Verifying T draft tokens reads the same bytes once but does T times the arithmetic; on a GPU
that is free until the batch reaches the roofline's ridge point, on a CPU each extra token costs
its dot products (docs/planner.md, "Speed").
"""

from __future__ import annotations

from dataclasses import dataclass

from homespec.plan.acceptance import AcceptanceModel, acceptance_model
from homespec.plan.devices import Device
from homespec.types import DraftSpec

# Fraction of peak memory bandwidth decoding achieves: llama.cpp reaches 70-85 % on NVIDIA
# cards (llama.cpp discussion #4167 "Performance of llama.cpp on Apple Silicon / NVIDIA"), Apple
# chips ~65-75 %, desktop CPUs 50-70 % of their DRAM bandwidth.
BANDWIDTH_EFFICIENCY = {"nvidia": 0.75, "amd": 0.65, "apple": 0.70, "host": 0.60}
# Fraction of fp16 tensor-core peak reached by quantised batched matmuls (MMQ / dequant + GEMM).
GPU_COMPUTE_EFFICIENCY = 0.5
# CPU matmul throughput per core: 32 fp32 FLOP/cycle (AVX2: 2 FMA units x 8 lanes x 2) at ~3 GHz,
# at 40 % efficiency for quantised dot products. Calibrated on SmolLM2-135M Q4_1: 2 cores verify
# 16 tokens in 56.5 ms vs 6.7 ms for one (facts gathered for homespec, llama.cpp 0.3.36).
CPU_FLOPS_PER_CORE = 32 * 3.0e9 * 0.40
GPU_TFLOPS_UNKNOWN = 40.0  # a conservative fp16 figure for a GPU missing from the catalogue
# Fixed per-forward overhead of the draft head (kernel launches / Python dispatch).
HEAD_OVERHEAD_S = {"gpu": 0.0004, "host": 0.0003}
# Fixed cost of one forward (graph build, launches, sampling): llama.cpp with CUDA graphs ~0.3 ms;
# on the CPU ~1 ms (SmolLM2-135M: 6.7 ms per token of which ~1 ms does not scale with the model).
FORWARD_OVERHEAD_S = {"gpu": 0.0003, "host": 0.001}
# An MoE layer costs a GPU more than its bytes: the router, top-k selection, expert-indexed matmuls and
# the weighted sum are a dozen small kernels per layer. Each switch between a GPU and the CPU inside one
# forward (an MoE layer on the GPU whose experts stay in RAM: hidden state to the CPU and back) costs a
# synchronisation and a small PCIe copy. 50 us per MoE layer and 0.12 ms per switch bring the roofline to
# three published Qwen3-30B-A3B Q4_K_M decode rates within 10 %: RTX 3090 Ti, all on the GPU, 4K context,
# 166.9 tok/s (smeltcore.com/recipes/qwen3-30b-a3b-rtx-3090-ti); RTX 4090, all on the GPU, 196 tok/s
# (runaihome.com/blog/qwen3-30b-a3b-local-ai-guide-2026); RTX 2080 + i9-10900X (102 GB/s measured), -ngl 99
# --n-cpu-moe 36, 36.7 tok/s (github.com/AlexsJones/llmfit pull 755). The roofline alone says 322, 322, 57.
MOE_LAYER_OVERHEAD_S = 0.00005
SWITCH_OVERHEAD_S = 0.00012
# Tree sizes tried besides the budgeted one, to say when a smaller tree would be faster.
SMALLER_TREES = (2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048)
# A smaller tree is worth a note only when it is clearly faster (the estimate is coarse).
FASTER_MARGIN = 1.05
# Rows of the passes whose time the estimate keeps (Estimate.rows_ms): the chains a lookup verifies
# (homespec.plan.lookups prices them for a workload).
PRICED_ROWS = 9


@dataclass(frozen=True, slots=True)
class DeviceLoad:
    device: Device
    read_bytes: int  # bytes read per decoded token (weights + average KV)
    flops_per_token: float  # 2 x parameters resident on the device
    switches: int = 0  # GPU <-> CPU hand-offs per forward that this device's work adds
    moe_layers: int = 0  # MoE layers whose routing runs on this device
    expert_bytes: int = 0  # routed-expert bytes resident on this device
    expert_share: float = 1.0  # n_expert_used / n_expert: the share one token reads
    # The network to and from this device's machine when it is another one (homespec.plan.network): a fixed
    # cost per forward (round trips) and a cost per token of the forward (activations both ways).
    link_fixed_s: float = 0.0
    link_per_token_s: float = 0.0

    def bytes_for(self, tokens: int) -> float:
        """Bytes one forward over `tokens` tokens reads. Each token picks its own experts: under
        independent routing the share of a layer's experts read is 1 - (1 - k/E)^T (the expected number of
        distinct experts among T draws of k of E), so verifying a draft tree reads more experts than
        decoding one token. Real routing repeats experts across nearby tokens, so this is an upper bound."""
        if not self.expert_bytes or tokens <= 1:
            return float(self.read_bytes)
        touched = 1.0 - (1.0 - self.expert_share) ** tokens
        return self.read_bytes + self.expert_bytes * (touched - self.expert_share)


@dataclass(frozen=True, slots=True)
class Estimate:
    plain_tokens_per_s: float
    spec_tokens_per_s: float | None
    speedup: float | None
    expected_tau: float | None  # tokens per target pass (acceptance length incl. the bonus token)
    verify_ms: float | None
    draft_ms: float | None
    plain_ms: float
    basis: str
    tree_tokens: int | None = None  # the draft tree the estimate is for: the one the plan budgets
    faster_tree_tokens: int | None = None  # a smaller tree estimated clearly faster here, if any
    faster_spec_tokens_per_s: float | None = None
    # The fastest tree tried (the budgeted one or a smaller one), whether or not it beats plain decoding.
    best_tree_tokens: int | None = None
    best_spec_tokens_per_s: float | None = None
    rows_ms: tuple[float, ...] = ()  # [r-1]: a target pass of r rows, r = 1..PRICED_ROWS

    @property
    def pays(self) -> bool | None:
        """Whether speculation with the budgeted shape beats plain decoding (None: no draft)."""
        return None if self.spec_tokens_per_s is None else self.spec_tokens_per_s > self.plain_tokens_per_s

    @property
    def run(self) -> tuple[int | None, float]:
        """What a run started from this plan settles on, as its guard sizes the draft by measured cost
        (homespec.speculative.guard): a smaller tree where one is clearly faster, the budgeted tree where
        it pays, else plain decoding -> (tree nodes, None for plain; tokens/s)."""
        if self.spec_tokens_per_s is None:
            return None, self.plain_tokens_per_s
        if self.faster_tree_tokens and self.faster_spec_tokens_per_s is not None:
            return self.faster_tree_tokens, self.faster_spec_tokens_per_s
        if self.pays:
            return self.tree_tokens, self.spec_tokens_per_s
        return None, self.plain_tokens_per_s


def _device_flops(d: Device, cpu_cores: int) -> float:
    if d.is_gpu:
        return (d.fp16_tflops or GPU_TFLOPS_UNKNOWN) * 1e12 * GPU_COMPUTE_EFFICIENCY
    return max(1, cpu_cores) * CPU_FLOPS_PER_CORE


def stage_seconds(ld: DeviceLoad, tokens: int, cpu_cores: int) -> float:
    """One device's part of a forward over `tokens` tokens, the network to its machine included."""
    eff = BANDWIDTH_EFFICIENCY.get(ld.device.vendor, 0.6)
    t_mem = ld.bytes_for(tokens) / (ld.device.bandwidth_gbs * 1e9 * eff)
    t_tok = ld.flops_per_token / _device_flops(ld.device, cpu_cores)
    if ld.device.is_gpu:
        t = max(t_mem, t_tok * tokens)  # roofline: memory-bound until the ridge point
    else:
        t = max(t_mem, t_tok) + t_tok * (tokens - 1)  # CPUs pay each extra token's dot products
    t += ld.switches * SWITCH_OVERHEAD_S + (ld.moe_layers * MOE_LAYER_OVERHEAD_S if ld.device.is_gpu else 0.0)
    return t + ld.link_fixed_s + ld.link_per_token_s * tokens


def forward_seconds(loads: list[DeviceLoad], tokens: int, cpu_cores: int) -> float:
    """Time of one target forward over `tokens` tokens: devices run one after another (a layer
    split is a pipeline of one request)."""
    total = sum(stage_seconds(ld, tokens, cpu_cores) for ld in loads)
    return total + FORWARD_OVERHEAD_S["gpu" if any(ld.device.is_gpu for ld in loads) else "host"]


def draft_seconds(draft: DraftSpec, device: Device, depth: int, topk: int, cpu_cores: int, head_bytes: int) -> float:
    """One drafting round: `depth` head forwards over up to `topk` nodes each."""
    eff = BANDWIDTH_EFFICIENCY.get(device.vendor, 0.6)
    params = head_bytes / 2  # heads are 16-bit
    per = max(head_bytes / (device.bandwidth_gbs * 1e9 * eff), 2 * params * topk / _device_flops(device, cpu_cores))
    return depth * (per + HEAD_OVERHEAD_S["gpu" if device.is_gpu else "host"])


def tree_step(loads: list[DeviceLoad], draft: DraftSpec, draft_device: Device, draft_bytes: int, acc: AcceptanceModel,
              nodes: int, depth: int, topk: int, cpu_cores: int) -> tuple[float, float, float, float]:
    """(tokens/s, τ, verify s, draft s) of speculation with a `nodes`-node tree of at most `depth` levels.

    A tree of T nodes has at most T − 1 levels below the root: that many head forwards, and the
    target verifies all T nodes in one pass (forward_seconds grows with T)."""
    levels = max(0, min(depth, nodes - 1))
    tau = acc.tau(nodes, depth)
    t_draft = draft_seconds(draft, draft_device, levels, topk, cpu_cores, draft_bytes)
    t_verify = forward_seconds(loads, nodes, cpu_cores)
    return tau / (t_verify + t_draft), tau, t_verify, t_draft


def estimate(
    loads: list[DeviceLoad],
    draft: DraftSpec | None,
    draft_device: Device | None,
    draft_bytes: int,
    tree_tokens: int,
    depth: int,
    topk: int,
    cpu_cores: int,
    draft_loads: list[DeviceLoad] | None = None,
) -> Estimate:
    plain = forward_seconds(loads, 1, cpu_cores)
    rows_ms = tuple(forward_seconds(loads, r, cpu_cores) * 1e3 for r in range(1, PRICED_ROWS + 1))
    basis = "memory-bandwidth roofline; an estimate, not a measurement"
    if draft is None or draft_device is None:
        return Estimate(1 / plain, None, None, None, None, None, plain * 1e3, basis, rows_ms=rows_ms)
    acc = acceptance_model(draft, tree_tokens, depth)
    faster = best = None
    if draft.kind == "model" and draft_loads:
        # A draft model proposes a chain: `depth` sequential one-token forwards.
        t_draft = depth * forward_seconds(draft_loads, 1, cpu_cores)
        t_verify = forward_seconds(loads, depth + 1, cpu_cores)
        tau = acc.tau(depth + 1, depth)
        spec, shape, nodes = tau / (t_verify + t_draft), f"a chain of {depth}", depth + 1
    else:
        # The tree the plan budgets (and a backend started from this plan runs); smaller trees
        # are estimated too, to say when one would be faster on this machine.
        spec, tau, t_verify, t_draft = tree_step(loads, draft, draft_device, draft_bytes, acc, tree_tokens, depth, topk, cpu_cores)
        shape, nodes = f"the {tree_tokens}-node tree, depth {max(0, min(depth, tree_tokens - 1))}, top-{topk}", tree_tokens
        best = (tree_tokens, spec)
        for t in (t for t in SMALLER_TREES if t < tree_tokens):
            cand = tree_step(loads, draft, draft_device, draft_bytes, acc, t, depth, topk, cpu_cores)[0]
            best = (t, cand) if cand > best[1] else best
            if cand > spec * FASTER_MARGIN and cand > 1 / plain and (faster is None or cand > faster[1]):
                faster = (t, cand)
    basis += f"; {tau:.2f} tokens per target pass assumed for {shape} ({acc.source})"
    if spec <= 1 / plain and faster is None:
        basis += "; speculation would not pay with this draft shape, so homespec's guard keeps plain decoding"
    return Estimate(1 / plain, spec, spec * plain, tau, t_verify * 1e3, t_draft * 1e3, plain * 1e3, basis, nodes,
                    faster[0] if faster else None, faster[1] if faster else None,
                    best[0] if best else None, best[1] if best else None, rows_ms)


def scaled(e: Estimate, factor: float) -> Estimate:
    """The estimate with every speed multiplied by `factor` (a calibration's measured / estimated)."""
    if factor == 1.0:
        return e
    from dataclasses import replace

    def times(x: float | None) -> float | None:
        return None if x is None else x * factor

    def over(x: float | None) -> float | None:
        return None if x is None else x / factor

    return replace(e, plain_tokens_per_s=e.plain_tokens_per_s * factor, spec_tokens_per_s=times(e.spec_tokens_per_s),
                   faster_spec_tokens_per_s=times(e.faster_spec_tokens_per_s),
                   best_spec_tokens_per_s=times(e.best_spec_tokens_per_s), verify_ms=over(e.verify_ms),
                   draft_ms=over(e.draft_ms), plain_ms=e.plain_ms / factor,
                   rows_ms=tuple(t / factor for t in e.rows_ms))

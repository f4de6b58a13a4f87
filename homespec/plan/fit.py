"""The solver: place layers on devices, budget every consumer, and say whether it fits.

`solve()` returns the Plan that `homespec plan` prints and that starts a backend (the same
object: docs/architecture.md, contract 4), once homespec.plan.suggest.advise has added what
would make it fit. Where each engine puts what is its own rule, in
homespec.plan.place (one module per backend); this module turns the placement into a verdict,
notes and a speed estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from homespec.plan.devices import device_label, host_cores
from homespec.plan.lines import LineItem, sum_bytes
from homespec.plan.lookups import DrafterOutlook
from homespec.plan.network import Network
from homespec.plan.place import DeviceUse, placer
from homespec.plan.settings import Settings, check_settings
from homespec.plan.speed import Estimate, estimate, scaled, stage_seconds
from homespec.types import DraftSpec, Machine, ModelSpec

FITS = "fits"
FITS_OFFLOADED = "fits_offloaded"
NO_FIT = "does_not_fit"


@dataclass(frozen=True, slots=True)
class Plan:
    model: ModelSpec
    draft: DraftSpec | None
    machine: Machine
    settings: Settings
    items: tuple[LineItem, ...]
    devices: tuple[DeviceUse, ...]
    verdict: str
    estimate: Estimate
    offloaded_layers: int  # target layers left on the host
    suggestions: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    network: Network | None = None  # the links to other machines' GPUs, when the plan spans machines
    workload: str | None = None  # plan --workload: the drafters' outlook is for it
    outlook: tuple[DrafterOutlook, ...] = ()  # each drafter's expected speedup on the workload, best first

    @property
    def total_bytes(self) -> int:
        return sum_bytes(self.items)

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
        """GPU and CPU share one pool of RAM (Apple Silicon, Strix Halo, DGX Spark)."""
        return any(d.device.unified for d in self.devices)

    @property
    def fits(self) -> bool:
        return self.verdict != NO_FIT


def solve(model: ModelSpec, draft: DraftSpec | None, machine: Machine, s: Settings) -> Plan:
    check_settings(s)
    rules = placer(s.backend)
    placed = rules.place(model, draft, machine, s)
    s2, lay, offloaded, output_on_host = placed.settings, placed.layout, placed.offloaded, placed.output_on_host
    notes: list[str] = []
    if not machine.gpus:
        notes.append("no GPU: everything runs on the CPU from RAM")
    if lay.fits:
        experts_in_ram = model.is_moe and bool(s2.n_cpu_moe) and bool(machine.gpus)
        verdict = FITS if offloaded == 0 and not output_on_host and not experts_in_ram else FITS_OFFLOADED
    else:
        verdict = NO_FIT
    notes += _family_notes(model, s, s2, bool(machine.gpus))
    if s.n_ctx > model.n_ctx_train > 0:
        notes.append(f"--ctx {s.n_ctx} exceeds the model's trained context {model.n_ctx_train}")
    draft_loads = None
    if draft is not None and draft.kind == "model" and draft.model is not None:
        dl = rules.layout(draft.model, None, machine, s2)
        draft_loads = dl.loads
    est = estimate(lay.loads, draft, lay.draft_device, lay.draft_bytes, s2.tree_tokens, s2.draft_depth,
                   s2.draft_topk, host_cores(machine), draft_loads)
    est = scaled(est, s.speed_scale)  # --calibrate: every figure below, notes and suggestions too, is measured-scaled
    if est.faster_tree_tokens:
        n = est.faster_tree_tokens
        notes.append(f"the {s2.tree_tokens} nodes budgeted are estimated at {est.spec_tokens_per_s:,.1f} tok/s here, a "
                     f"{n}-node tree at {est.faster_spec_tokens_per_s:,.1f}: the headline's; --draft-tokens {n} "
                     "budgets just that")
    uses = lay.uses
    if lay.network is not None:
        notes.append(_network_note(lay, est, host_cores(machine)))
    return Plan(model, draft, machine, s2, lay.items, uses, verdict, est, offloaded, (), tuple(notes), lay.network)


def _network_note(lay, est: Estimate, cores: int) -> str:
    """What the network costs a token, and the rate a full pipeline of sequences could reach."""
    net = lay.network
    where = ", ".join(f"{h.remote} ({h.layers} layers on {'+'.join(map(device_label, h.devices))})" for h in net.hops)
    slowest = max(stage_seconds(ld, 1, cores) for ld in lay.loads)
    return (f"network: {len(net.hops)} remote machine(s) over {net.link.name}: {where}; "
            f"{net.bytes_per_token():,} bytes and {net.seconds(1) * 1e3:.2f} ms per token "
            f"({net.seconds(est.tree_tokens or 1) * 1e3:.2f} ms to verify {est.tree_tokens or 1} tokens); "
            f"one sequence decodes through every stage in turn, several in flight at most "
            f"{1 / slowest:,.1f} tok/s (the slowest stage with its transfers)")


def _family_notes(model: ModelSpec, asked: Settings, solved: Settings, gpus: bool) -> list[str]:
    """What the plan chose or assumed for MoE, hybrid and unknown-architecture models."""
    notes = []
    if model.is_moe and gpus and solved.backend == "llamacpp":
        k = solved.n_cpu_moe or 0
        how = "as asked" if asked.n_cpu_moe is not None else "chosen by the solver"
        if k == 0:
            notes.append(f"MoE: every expert on the GPU(s) ({how})")
        else:
            notes.append(f"MoE: the routed experts of the first {k} of {model.n_layer} layers stay in RAM "
                         f"(--n-cpu-moe {k}, {how}); attention, shared experts and KV of every GPU layer stay on the GPU")
    if asked.n_cpu_moe and not model.is_moe:
        notes.append(f"--n-cpu-moe {asked.n_cpu_moe} has no effect: {model.name} has no routed experts")
    if model.kv_rule_note:
        notes.append(model.kv_rule_note)
    return notes

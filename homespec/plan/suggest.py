"""What would make a plan fit entirely on the GPUs, or fit at all: each suggestion is re-solved, never guessed.

The draft is one of the things that may not fit or not pay: draft_suggestions() and no_pay_note() say
when a smaller tree or no draft at all fits, and when no draft shape beats plain decoding here."""

from __future__ import annotations

import shlex
from dataclasses import replace

from homespec.plan.devices import GIB, device_label
from homespec.plan.fit import FITS, NO_FIT, Plan, solve
from homespec.plan.lines import LineKind
from homespec.plan.render import gib
from homespec.quant.predict import predict_tensors

# Smaller file types to try, largest first (llama.cpp's usual ladder).
QUANT_LADDER = ("Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS", "Q3_K_M", "IQ3_XXS", "Q2_K")
MIN_USEFUL_CTX = 512
# What a plan budgets for the draft (homespec.plan.place.ledger): dropping the draft frees these.
DRAFT_ITEMS = frozenset({LineKind.DRAFT_WEIGHTS, LineKind.DRAFT_KV, LineKind.TREE_SCRATCH, LineKind.DRAFT_EMBEDDINGS})


def _fits_fully(plan: Plan) -> bool:
    return plan.verdict == FITS


def largest_context(plan: Plan) -> int | None:
    """Binary search the largest --ctx (a multiple of 256) with everything on the GPUs."""
    s = plan.settings
    lo, hi, best = MIN_USEFUL_CTX // 256, s.n_ctx // 256 - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        p = solve(plan.model, plan.draft, plan.machine, s.with_(n_ctx=mid * 256))
        if _fits_fully(p):
            best, lo = mid * 256, mid + 1
        else:
            hi = mid - 1
    return best


def suggestions(plan: Plan) -> list[str]:
    out: list[str] = []
    s = plan.settings
    draft = draft_suggestions(plan)
    if plan.estimate.pays is False:  # the draft neither fits nor pays: say so first
        out += draft
    if not plan.machine.gpus:
        if plan.verdict == NO_FIT:
            over = -plan.headroom_bytes
            out.append(f"needs {over / GIB:.1f} GiB more RAM; try a smaller quant or a shorter --ctx")
        return out if plan.estimate.pays is False else out + draft
    ctx = largest_context(plan)
    if ctx:
        out.append(f"--ctx {ctx} fits entirely on the GPU(s)")
    if s.backend == "llamacpp" and s.type_k == "f16":
        p = solve(plan.model, plan.draft, plan.machine, s.with_(type_k="q8_0", type_v="q8_0", flash_attn=True))
        if _fits_fully(p):
            out.append("--kv-type q8_0 --flash-attn fits entirely on the GPU(s)")
    quant = _smaller_quant(plan)
    if quant:
        out.append(quant)
    g = plan.machine.gpus[0]
    for extra in range(1, 4):  # the fewest more GPUs of the same kind that hold everything
        if len(plan.machine.gpus) + extra > 8 or g.unified:  # a unified chip is the machine's one GPU (plan/machine.py)
            break
        more = tuple(replace(g, index=len(plan.machine.gpus) + i) for i in range(extra))
        bigger = replace(plan.machine, gpus=(*plan.machine.gpus, *more))
        if _fits_fully(solve(plan.model, plan.draft, bigger, s)):
            names = ",".join(short_gpu_name(x.name) for x in bigger.gpus)
            out.append(f"{extra} more {g.name} fit{'s' if extra == 1 else ''} it entirely on GPUs (--gpu {shlex.quote(names)})")
            break
    if plan.verdict != NO_FIT and s.backend == "llamacpp" and s.type_k == "f16":
        p = solve(plan.model, plan.draft, plan.machine, s.with_(type_k="q8_0", type_v="q8_0", flash_attn=True))
        gained = p.settings.n_gpu_layers - s.n_gpu_layers
        if gained > 0 and not _fits_fully(p):
            out.append(f"--kv-type q8_0 --flash-attn keeps {gained} more layer{'s' if gained > 1 else ''} on the GPU(s)")
    if plan.estimate.pays is not False:
        out += draft
    if plan.draft is not None and plan.verdict != NO_FIT:
        p = solve(plan.model, None, plan.machine, s)
        if _fits_fully(p):
            out.append("without the draft (--draft none) it fits entirely on the GPU(s), but runs without speculation")
    if s.backend == "torch":
        out.append("the torch backend holds the whole model in 16-bit; --backend llamacpp runs quantised and can offload")
    return out


def short_gpu_name(name: str) -> str:
    """"NVIDIA GeForce RTX 4090" -> "4090": the form --gpu accepts and people type."""
    for prefix in ("NVIDIA ", "GeForce ", "RTX "):
        name = name.removeprefix(prefix)
    return name.lower().replace(" ", "-")


def _smaller_quant(plan: Plan) -> str | None:
    model = plan.model
    if model.format != "catalogue" or not model.quant or model.quant.startswith("EXL2"):
        return None
    current = sum(t.n_bytes for t in model.tensors or ())
    for q in QUANT_LADDER:
        tensors = predict_tensors(model, q)
        if sum(t.n_bytes for t in tensors) >= current:
            continue
        candidate = replace(model, quant=q, tensors=tensors)
        p = solve(candidate, plan.draft, plan.machine, plan.settings)
        if _fits_fully(p):
            return f"{q} ({model.family or model.name}-{q.lower()}) fits entirely on the GPU(s)"
    return None


def without_draft(plan: Plan) -> Plan | None:
    """The same plan re-solved with no draft (None when it has none)."""
    if plan.draft is None:
        return None
    return solve(plan.model, None, plan.machine, plan.settings)


def _where(p: Plan) -> str:
    if p.verdict == FITS:
        return " entirely on the GPU(s)" if p.machine.gpus else " in RAM"
    if p.offloaded_layers:
        return f" with {p.offloaded_layers} of {p.model.n_layer} layers offloaded (-ngl {p.settings.n_gpu_layers})"
    return ""


def draft_suggestions(plan: Plan) -> list[str]:
    """When the plan does not fit: the smaller tree the estimate prefers, and no draft, if either fits."""
    if plan.verdict != NO_FIT or plan.draft is None:
        return []
    out, e, kind = [], plan.estimate, plan.draft.kind
    if e.faster_tree_tokens:
        n = e.faster_tree_tokens
        p = solve(plan.model, plan.draft, plan.machine, plan.settings.with_(tree_tokens=n))
        if p.fits and p.estimate.spec_tokens_per_s is not None:
            out.append(f"--draft-tokens {n} fits{_where(p)} with {gib(p.headroom_bytes)} to spare, "
                       f"{p.estimate.spec_tokens_per_s:,.1f} tok/s with {kind}")
    p = without_draft(plan)
    if p is not None and p.fits:
        out.append(f"--draft none fits{_where(p)} with {gib(p.headroom_bytes)} to spare, "
                   f"{p.estimate.plain_tokens_per_s:,.1f} tok/s without speculation")
    return out


def no_pay_note(plan: Plan) -> str | None:
    """When no draft shape tried beats plain decoding: the best choice is no draft; say what that frees."""
    e = plan.estimate
    if plan.draft is None or e.pays is not False or e.faster_tree_tokens:
        return None
    freed: dict[int, int] = {}
    for i in plan.items:
        if i.kind in DRAFT_ITEMS:
            freed[i.device] = freed.get(i.device, 0) + i.bytes
    where = " and ".join(f"{gib(b)} on {device_label(d)}" for d, b in freed.items() if b)
    if e.best_tree_tokens:
        best = (f"no draft tree of {plan.settings.tree_tokens} nodes or fewer is estimated to beat plain decoding here "
                f"(the best, --draft-tokens {e.best_tree_tokens}, at {e.best_spec_tokens_per_s:,.1f} tok/s against "
                f"{e.plain_tokens_per_s:,.1f} plain)")
    else:
        best = f"the draft is not estimated to beat plain decoding here ({e.plain_tokens_per_s:,.1f} tok/s plain)"
    note = f"{best}, so no draft is the better choice: --draft none frees {where or 'nothing'}"
    p = without_draft(plan) if plan.verdict != NO_FIT else None  # a plan that does not fit: the try: line says it
    if p is not None and p.fits and _placed_otherwise(p, plan):
        note += f" and fits{_where(p)} with {gib(p.headroom_bytes)} to spare, {p.estimate.plain_tokens_per_s:,.1f} tok/s"
    return note


def _placed_otherwise(a: Plan, b: Plan) -> bool:
    """Whether two plans of one model put it elsewhere (more on the GPUs, experts moved, another verdict)."""
    sa, sb = a.settings, b.settings
    return (a.verdict, sa.n_gpu_layers, sa.layer_split, sa.n_cpu_moe) != (b.verdict, sb.n_gpu_layers, sb.layer_split, sb.n_cpu_moe)


def advise(plan: Plan) -> Plan:
    """The plan with what would make it fit (when it does not fit entirely) and, when no draft
    shape pays here, the note that says so: solve() places, this re-solves the alternatives."""
    note = no_pay_note(plan)
    return replace(plan, suggestions=tuple(suggestions(plan)) if plan.verdict != FITS else (),
                   notes=(*plan.notes, note) if note else plan.notes)

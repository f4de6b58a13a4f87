"""Plan -> rich table or JSON dict (the command line that serves it elsewhere: homespec.plan.emit)."""

from __future__ import annotations

from homespec.plan.devices import GIB, device_label
from homespec.plan.fit import FITS, FITS_OFFLOADED, Plan
from homespec.plan.lines import LineKind
from homespec.plan.lookups import outlook_line
from homespec.quant.weights import active_params, group_weights


def gib(n: int) -> str:
    return f"{n / GIB:,.2f} GiB"


def _pool(plan: Plan) -> str:
    """On a Mac: what GPU and CPU take together of the one pool."""
    host = next(d for d in plan.devices if not d.device.is_gpu)
    return f"GPU + CPU {gib(host.used_bytes + host.shared_bytes)} of {gib(host.device.capacity_bytes)}"


def _capacity_note(devices) -> str:
    limits = "; ".join(dict.fromkeys(u.device.limit for u in devices if u.device.is_gpu and u.device.limit))
    return f"gpu: {limits}; host: RAM less the OS's"


def verdict_line(plan: Plan) -> str:
    s = plan.settings
    if plan.verdict == FITS:
        where = "on the GPU(s)" if plan.machine.gpus else "in RAM (CPU only)"
        return f"fits {where} with {gib(plan.headroom_bytes)} to spare at --ctx {s.n_ctx}"
    if plan.verdict == FITS_OFFLOADED:
        host = next(d for d in plan.devices if not d.device.is_gpu)
        need = f"unified memory holds {_pool(plan)}" if plan.unified else f"needs {gib(host.used_bytes)} of RAM"
        k = s.n_cpu_moe or 0
        if plan.model.is_moe and k and plan.offloaded_layers == 0:
            return (f"fits with the experts of {k} of {plan.model.n_layer} layers in RAM (--n-cpu-moe {k}), "
                    f"everything else on the GPU(s); {need}")
        if plan.model.is_moe and k:
            return (f"fits with {plan.offloaded_layers} of {plan.model.n_layer} layers offloaded to the CPU "
                    f"(-ngl {s.n_gpu_layers}) and the experts of {k} layers in RAM (--n-cpu-moe {k}); {need}")
        return (f"fits with {plan.offloaded_layers} of {plan.model.n_layer} layers offloaded to the CPU "
                f"(-ngl {s.n_gpu_layers}); {need}")
    tight = plan.tightest
    line = f"does not fit: {gib(max(0, -plan.headroom_bytes))} over"
    if tight is None:
        return line
    if plan.unified and not tight.device.is_gpu:
        return line + f" in unified memory ({_pool(plan)})"
    return line + f" on {tight.device.label} ({tight.device.name})"


def headline(plan: Plan) -> str:
    """The estimate of what a run would do here: the draft shape its guard settles on
    (Estimate.run), the budgeted one only where that is it."""
    e, kind = plan.estimate, plan.draft.kind if plan.draft else "draft"
    line = f"estimated decode: {e.plain_tokens_per_s:,.1f} tok/s plain"
    if e.spec_tokens_per_s is None:
        return line
    nodes, rate = e.run
    budget = plan.settings.tree_tokens
    if nodes is None:
        return line + (f"; {kind} would not pay here ({e.spec_tokens_per_s:,.1f} tok/s with the {budget}-node tree), "
                       "so homespec's guard decodes plainly")
    line += f", {rate:,.1f} tok/s with {kind} ({rate / e.plain_tokens_per_s:.2f}x)"
    if nodes != e.tree_tokens:
        line += f" drafting {nodes}-node trees, the guard's choice here within the {budget} budgeted"
    return line


def to_json(plan: Plan) -> dict:
    s = plan.settings
    e = plan.estimate
    m = plan.model
    d = plan.draft
    return {
        "verdict": plan.verdict,
        "fits": plan.fits,
        "total_bytes": plan.total_bytes,
        "headroom_bytes": plan.headroom_bytes,
        "offloaded_layers": plan.offloaded_layers,
        "items": [{"name": i.kind.label, "device": device_label(i.device), "bytes": i.bytes, "detail": i.detail}
                  for i in plan.items],
        "devices": [
            {"id": u.device.label, "name": u.device.name, "capacity_bytes": u.device.capacity_bytes,
             "used_bytes": u.used_bytes, "shared_bytes": u.shared_bytes, "headroom_bytes": u.headroom_bytes,
             "bandwidth_gbs": u.device.bandwidth_gbs}
            for u in plan.devices
        ],
        "unified_memory": plan.unified,
        "settings": {
            "backend": s.backend, "n_ctx": s.n_ctx, "type_k": s.type_k, "type_v": s.type_v,
            "flash_attn": s.flash_attn, "n_ubatch": s.n_ubatch, "n_batch": s.n_batch,
            "n_gpu_layers": s.n_gpu_layers, "layer_split": list(s.layer_split),
            "tree_tokens": s.tree_tokens, "draft_depth": s.draft_depth, "draft_topk": s.draft_topk,
            "parallel": s.n_seq, "swa_full": s.swa_full, "n_cpu_moe": s.n_cpu_moe or 0,
        },
        "parallel": s.n_seq,
        "model": {"name": m.name, "arch": m.arch, "quant": m.quant, "format": m.format, "source": m.source,
                  "n_layer": m.n_layer, "n_ctx_train": m.n_ctx_train,
                  "weights_bytes": sum(t.n_bytes for t in m.tensors or ()), **_family_json(m)},
        "draft": None if d is None else {"name": d.name, "kind": d.kind, "draft_vocab": d.draft_vocab,
                                         "fc_norm": d.fc_norm, "norm_output": d.norm_output, "source": d.source},
        "estimate": {
            "plain_tokens_per_s": round(e.plain_tokens_per_s, 2),
            "spec_tokens_per_s": None if e.spec_tokens_per_s is None else round(e.spec_tokens_per_s, 2),
            "speedup": None if e.speedup is None else round(e.speedup, 3),
            "expected_tau": e.expected_tau,
            "basis": e.basis,
            # what a run settles on here (the headline): the guard's tree, or plain decoding (null)
            "run_tree_tokens": e.run[0],
            "run_tokens_per_s": round(e.run[1], 2),
        },
        "suggestions": list(plan.suggestions),
        "notes": list(plan.notes),
        "message": verdict_line(plan),
    } | ({"network": plan.network.as_json()} if plan.network is not None else {}) | _workload_json(plan)


def _workload_json(plan: Plan) -> dict:
    """plan --workload: each drafter's expected speedup on it, best first, and who is expected to pay."""
    if plan.workload is None:
        return {}
    best = plan.outlook[0] if plan.outlook and plan.outlook[0].speedup > 1.0 else None
    return {"workload": {"name": plan.workload, "expected_drafter": None if best is None else best.drafter,
                         "drafters": [{"drafter": o.drafter, "speedup": round(o.speedup, 3), "tau": round(o.tau, 3),
                                       "basis": o.basis} for o in plan.outlook]}}


def _family_json(m) -> dict:
    """The architecture-family facts the plan used (absent keys: a dense model)."""
    out: dict = {}
    if m.tensors:
        out["n_params"] = group_weights(m).n_params
    if m.is_moe:
        out.update(n_expert=m.n_expert, n_expert_used=m.n_expert_used,
                   n_params_active=m.n_params_active or (active_params(m) if m.tensors else None))
    if m.is_mla:
        out["kv_lora_rank"] = m.kv_lora_rank
    if m.recurrent_layers:
        out["recurrent_layers"] = len(m.recurrent_layers)
    if m.sliding_window and m.swa_layers:
        out.update(sliding_window=m.sliding_window, swa_layers=len(m.swa_layers))
    if m.n_nextn_layer:
        out["n_nextn_layer"] = m.n_nextn_layer
    return out


def render(plan: Plan, console) -> None:
    from rich.table import Table

    m, d, s = plan.model, plan.draft, plan.settings
    moe = f", MoE {m.n_expert_used} of {m.n_expert} experts" if m.is_moe else ""
    seqs = f", {s.n_seq} sequences" if s.n_seq > 1 else ""
    console.print(f"[bold]{m.name}[/] ({m.quant or m.format}, {m.n_layer} layers{moe})"
                  + (f" + [bold]{d.name}[/] ({d.kind})" if d else " (no draft)")
                  + f" on {s.backend}, --ctx {s.n_ctx}{seqs}, KV {s.type_k}/{s.type_v}, flash attention {'on' if s.flash_attn else 'off'}")
    devices = [u for u in plan.devices if u.used_bytes > 0 or u.device.is_gpu]
    table = Table(show_footer=True)
    table.add_column("item", footer="total")
    for u in devices:
        table.add_column(f"{u.device.label}: {u.device.name}", justify="right", footer=gib(u.used_bytes))
    table.add_column("detail", style="dim")
    kinds = {i.kind for i in plan.items}
    for kind in (k for k in LineKind if k in kinds):  # in the enum's order
        row = [kind.label]
        details = []
        for u in devices:
            b = sum(i.bytes for i in plan.items if i.kind == kind and i.device == u.device.id)
            row.append(gib(b) if b else "")
            details += [i.detail for i in plan.items if i.kind == kind and i.device == u.device.id and i.detail]
        row.append("; ".join(dict.fromkeys(details)))
        table.add_row(*row)
    if any(u.shared_bytes for u in devices):
        table.add_row("GPU's share", *[gib(u.shared_bytes) if u.shared_bytes else "" for u in devices],
                      f"{device_label(0)}'s total again: it is the same RAM")
    table.add_row("capacity", *[gib(u.device.capacity_bytes) for u in devices],
                  _capacity_note(devices) if plan.unified else "")
    table.add_row("headroom", *[("[red]" if u.headroom_bytes < 0 else "[green]") + gib(u.headroom_bytes) for u in devices], "")
    console.print(table)
    color = "green" if plan.verdict == FITS else ("yellow" if plan.verdict == FITS_OFFLOADED else "red")
    console.print(f"[{color} bold]{verdict_line(plan)}[/]")
    if len(s.layer_split) > 1:
        console.print("layer split: " + ", ".join(f"{device_label(i)} {n}" for i, n in enumerate(s.layer_split)))
    console.print(headline(plan) + f"  [dim]({plan.estimate.basis})[/]")
    if plan.workload is not None:
        console.print(outlook_line(plan.workload, plan.outlook))
    for n in plan.notes:
        console.print(f"[dim]note: {n}[/]")
    for sug in plan.suggestions:
        console.print(f"try: {sug}")


"""Draft specs: a head of profiles/drafts.toml as the planner counts it, a model's derived (trainable)
EAGLE-3.1 head, and a model's own MTP layers as its draft. homespec.catalog reads the tables and
calls these; the tensor list is what `homespec plan` budgets (docs/catalogue.md, "Heads and their targets").

Pure: no torch (the planner imports this).
"""

from __future__ import annotations

import math

from homespec.embedded import HEADS_DIR  # heads shipped with homespec (docs/training.md)
from homespec.errors import UsageError
from homespec.quant.weights import active_fraction, group_weights
from homespec.types import DraftSpec, ModelSpec, TensorInfo


def draft_tensors(d: dict) -> tuple[TensorInfo, ...]:
    """The checkpoint's tensors (ggml order: ne[0] = input width). Embeddings come from the target."""
    h, ht, hd = d["n_embd"], d["target_hidden"], d["head_dim"]
    q, kv = d["n_head"] * hd, d["n_head_kv"] * hd
    # bytes per element as (numerator, denominator): q8_0 stores 32 weights in 34 bytes
    wtype, num, den = {"bf16": ("BF16", 2, 1), "f16": ("F16", 2, 1), "f32": ("F32", 4, 1),
                       "q8_0": ("Q8_0", 34, 32)}[d.get("dtype", "bf16")]
    gguf = d.get("format") == "gguf"  # an eagle3 GGUF: norms in F32, d2t absolute, no t2d (heads/gguf.py)
    shapes = [("fc.weight", (3 * ht, h))]
    if d.get("fc_norm"):
        shapes += [(f"fc_norm.{i}.weight", (ht,)) for i in range(3)]
    if d.get("norm_before_fc"):  # one RMSNorm over the concatenated features
        shapes += [("input_norm.weight", (3 * ht,))]
    m = "midlayer."
    shapes += [
        (m + "hidden_norm.weight", (h,)), (m + "input_layernorm.weight", (h,)),
        (m + "post_attention_layernorm.weight", (h,)),
        # q/k/v read cat(input_layernorm(emb), hidden_norm(h)): twice the hidden width
        (m + "self_attn.q_proj.weight", (2 * h, q)), (m + "self_attn.k_proj.weight", (2 * h, kv)),
        (m + "self_attn.v_proj.weight", (2 * h, kv)), (m + "self_attn.o_proj.weight", (q, h)),
        (m + "mlp.gate_proj.weight", (h, d["n_ff"])), (m + "mlp.up_proj.weight", (h, d["n_ff"])),
        (m + "mlp.down_proj.weight", (d["n_ff"], h)),
        ("norm.weight", (h,)), ("lm_head.weight", (h, d["draft_vocab"])),
    ]
    out = []
    for n, s in shapes:
        layer = 0 if n.startswith(m) else None
        if gguf and len(s) == 1:
            out.append(TensorInfo(n, s, "F32", math.prod(s) * 4, layer))
        else:
            out.append(TensorInfo(n, s, wtype, math.prod(s) * num // den, layer))
    # draft id -> target id offsets (int64) and the target-vocab membership mask (bool)
    out.append(TensorInfo("d2t", (d["draft_vocab"],), "I64", d["draft_vocab"] * 8))
    if not gguf:
        out.append(TensorInfo("t2d", (d["target_vocab"],), "I8", d["target_vocab"]))
    return tuple(out)


def draft_spec(d: dict, target: str) -> DraftSpec:
    tensors = draft_tensors(d)
    acceptance = ()
    if d.get("acceptance"):  # a head shipped with homespec: its recorded acceptance (homespec/data/heads/)
        # startup: `homespec plan` reads no acceptance file for a catalogue model
        from homespec.formats.acceptance import read_records

        acceptance = read_records(HEADS_DIR / d["acceptance"])
    return DraftSpec(
        name=d["id"], kind=d["kind"], target=target, n_layer=1, n_embd=d["n_embd"], n_head=d["n_head"],
        n_head_kv=d["n_head_kv"], head_dim=d["head_dim"], n_ff=d["n_ff"], draft_vocab=d["draft_vocab"],
        target_vocab=d["target_vocab"], target_hidden=d["target_hidden"],
        weight_bytes=sum(t.n_bytes for t in tensors), dtype=d.get("dtype", "bf16"),
        fc_norm=bool(d.get("fc_norm")), norm_output=bool(d.get("norm_output")),
        source=_where(d) + (" — " if d.get("repo") else "") + d["source"], tensors=tensors,
        acceptance=acceptance,
    )


def draft_names(d: dict) -> tuple[str, ...]:
    """What a [[draft]] answers to: its id, its repo (and repo/file for a sidecar), eagle3-<target>."""
    names = [d["id"], *(f"eagle3-{t}" for t in d["targets"])]
    if d.get("repo"):
        names += [d["repo"], *([f"{d['repo']}/{d['file']}"] if d.get("file") else [])]
    return tuple(names)


def _where(d: dict) -> str:
    return (d.get("repo") or "") + (f"/{d['file']}" if d.get("file") else "")


def derived_draft(model: ModelSpec) -> DraftSpec:
    """A homespec-trainable EAGLE-3.1 head shaped like one decoder layer of `model` (not published)."""
    d = {
        "id": f"homespec-eagle3.1-{model.family or model.name}", "kind": "eagle3.1",
        "n_embd": model.n_embd, "n_head": model.n_head, "n_head_kv": model.n_head_kv, "head_dim": model.head_dim,
        "n_ff": model.n_ff, "draft_vocab": min(32000, model.n_vocab), "target_vocab": model.n_vocab,
        "target_hidden": model.n_embd, "dtype": "bf16", "fc_norm": True, "norm_output": True,
        "source": f"homespec-trainable EAGLE-3.1 head derived from {model.family or model.name}'s shape "
                  "(no published head; train it with `homespec draft train`)",
    }
    return draft_spec(d, model.family)


def mtp_draft(model: ModelSpec) -> DraftSpec:
    """The target's next-token-prediction layers as a draft (llama.cpp --spec-type draft-mtp loads them
    with load_mtp and gives them their own KV cache of those layers, llama-model.cpp create_memory).

    Their bytes come from the file's blk.n_layer.. tensors; a catalogue or config.json model (whose
    predicted tensors stop at n_layer) is costed as n_nextn_layer of its own average layers plus the
    2H x H eh_proj that joins the embedding and the hidden state."""
    if not model.n_nextn_layer:
        raise UsageError(f"{model.name} has no MTP layers", hint="use --draft none, or an EAGLE-3 head")
    g = group_weights(model)
    if g.mtp:
        weights, source = g.mtp, f"the {model.n_nextn_layer} MTP layer(s) in {model.source}"
    else:
        per_param = (sum(g.per_layer) / max(1, g.n_params)) if g.n_params else 2.0
        layer = sum(g.per_layer) // max(1, model.n_layer)
        weights = model.n_nextn_layer * (layer + int(2 * model.n_embd * model.n_embd * per_param))
        source = f"{model.n_nextn_layer} MTP layer(s) of {model.name}, costed as its average layer + eh_proj"
    exps = sum(g.per_layer_exps) // max(1, model.n_layer) * model.n_nextn_layer if model.is_moe else 0
    read = int(weights - exps * (1.0 - active_fraction(model)))
    return DraftSpec(
        name=f"{model.family or model.name}-mtp", kind="mtp", target=model.family, n_layer=model.n_nextn_layer,
        n_embd=model.n_embd, n_head=model.n_head, n_head_kv=model.n_head_kv, head_dim=model.head_dim,
        n_ff=model.n_ff, draft_vocab=model.n_vocab, target_vocab=model.n_vocab, target_hidden=model.n_embd,
        weight_bytes=weights, dtype=(model.quant or "").lower(), source=source, model=model, read_bytes=read,
    )


__all__ = ["derived_draft", "draft_names", "draft_spec", "draft_tensors", "mtp_draft"]

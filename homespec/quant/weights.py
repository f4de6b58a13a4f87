"""A model's weights grouped as llama.cpp loads them: per layer (routed experts apart), the
embedding, the output matrix (the embedding again when tied), the MTP layers; and the share of a
layer's bytes one token reads. The planner's memory and speed models and the catalogue's MTP
draft are all costed from these sums.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from homespec.errors import UsageError
from homespec.types import ModelSpec


# --- target weights grouped by layer ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WeightGroups:
    per_layer: tuple[int, ...]  # bytes of blk.N.* for N in 0..n_layer-1 (routed experts included)
    embd: int  # token_embd (the input lookup)
    output: int  # output.weight + output_norm; for tied models the duplicated token_embd
    other: int  # anything else (rope_freqs, ...)
    tied: bool
    n_params: int
    # Routed-expert tensors of each layer (what --n-cpu-moe moves), and the next-token-prediction
    # layers' bytes (blk.n_layer.. : not loaded for plain decoding, llama.cpp TENSOR_SKIP).
    per_layer_exps: tuple[int, ...] = ()
    mtp: int = 0
    n_params_exps: int = 0  # parameters in routed experts (for active-parameter counts)


# llama.cpp's expert tensors as --n-cpu-moe / --cpu-moe match them (common/common.h LLM_FFN_EXPS_REGEX:
# "\.ffn_(up|down|gate|gate_up)_(ch|)exps"): routed experts, not the shared expert (shexp) or the router.
EXPS_RE = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")


def is_expert_tensor(name: str) -> bool:
    return EXPS_RE.search(name) is not None


def _by_identity(fn):
    """Cache per model object: hashing a spec hashes every tensor, which costs more than the sum."""
    cache: dict[int, tuple[ModelSpec, object]] = {}

    @functools.wraps(fn)
    def wrapper(model: ModelSpec):
        hit = cache.get(id(model))
        if hit is not None and hit[0] is model:
            return hit[1]
        if len(cache) > 64:
            cache.clear()
        value = fn(model)
        cache[id(model)] = (model, value)
        return value

    return wrapper


@_by_identity
def group_weights(model: ModelSpec) -> WeightGroups:
    if not model.tensors:
        raise UsageError(f"no tensor list for '{model.name}'", hint="pass a GGUF file, a catalogue name or --quant")
    per_layer = [0] * model.n_layer
    per_layer_exps = [0] * model.n_layer
    embd = output = other = n_params = mtp = n_params_exps = 0
    has_output = False
    embd_bytes = 0
    for t in model.tensors:
        if t.layer is not None and t.layer >= model.n_layer and model.n_nextn_layer:
            mtp += t.n_bytes  # an MTP layer: loaded only for an MTP draft
            continue
        n_params += t.n_elements
        if t.layer is not None and 0 <= t.layer < model.n_layer:
            per_layer[t.layer] += t.n_bytes
            if is_expert_tensor(t.name):
                per_layer_exps[t.layer] += t.n_bytes
                n_params_exps += t.n_elements
        elif t.name.startswith("token_embd"):
            embd += t.n_bytes
            embd_bytes = t.n_bytes if t.name == "token_embd.weight" else embd_bytes
        elif t.name.startswith("output"):
            output += t.n_bytes
            has_output |= t.name == "output.weight"
        else:
            other += t.n_bytes
    tied = not has_output
    if tied:
        # llama.cpp loads token_embd a second time as the output matrix (TENSOR_DUPLICATED).
        output += embd_bytes
    return WeightGroups(tuple(per_layer), embd, output, other, tied, n_params, tuple(per_layer_exps), mtp, n_params_exps)


def active_fraction(model: ModelSpec) -> float:
    """The share of a layer's routed-expert bytes one token reads: n_expert_used of n_expert."""
    if not model.is_moe or not model.n_expert_used:
        return 1.0
    return min(1.0, model.n_expert_used / model.n_expert)


def active_params(model: ModelSpec) -> int:
    """Parameters one token uses: everything but the routed experts it does not choose (the tied
    output counted once, as model cards count)."""
    g = group_weights(model)
    return int(g.n_params - g.n_params_exps * (1.0 - active_fraction(model)))

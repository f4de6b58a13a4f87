"""Pure pieces of the EXL2 backend: where features are read, the additive tree mask, tree RoPE
rows and how a commit is carried out. No exllamav2 import: tested on the CPU. The tree contract
(validation, depths) is homespec.contracts.tree's.

How exllamav2 0.3.2 is driven (exllamav2/model.py, attn.py, attn_params.py):

* `ExLlamaV2.forward_chunk(..., attn_params=, extract_state_indices=)` returns the input of any
  module by index in `r["states"]`. model.modules is [embedding, (attention, mlp) per layer,
  norm, head]; an attention module's input is the residual stream entering its decoder layer
  (the layer's input norm lives inside the module), which is the EAGLE-3 feature.
* The attention mask: `Params.get_attn_mask()` returns a preset `attn_mask`, and
  `get_block_diag_mask()` a preset `block_diag_mask`; a non-None `input_mask` makes
  `is_causal()` False, which keeps flash-attn/xformers (causal only) out and routes attention
  through `_attn_torch`, whose SDPA branch reads the block-diagonal mask and whose matmul branch
  the attention mask. Setting all three to one additive [1, 1, T, past+T] mask makes every path
  apply exactly our mask, for trees and for plain causal chunks alike.
* Positions: `Params(alt_rope_embed={device: (sin, cos)})` replaces the RoPE tables, which are
  indexed by absolute position (past_len + i). For a tree, rows past..past+T of a private copy
  are overwritten with the rows of positions past + depth(i), and restored afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from homespec.errors import HomespecError

if TYPE_CHECKING:
    import torch

MASKED = -65504.0  # the most negative fp16, what exllamav2 itself writes into masks


def feature_module_indices(kinds: Sequence[tuple[str, int | None]], layers: Sequence[int], n_layer: int) -> list[int]:
    """Module indices whose *inputs* are the inputs of decoder `layers`.

    kinds: one (kind, layer_idx) per module of model.modules, kind "attn" for an attention
    module; layer n_layer means the final norm's input (the last layer's output)."""
    attn = {layer: i for i, (kind, layer) in enumerate(kinds) if kind == "attn"}
    norm = next((i for i, (kind, _) in enumerate(kinds) if kind == "norm"), None)
    out = []
    for layer in layers:
        if layer == n_layer and norm is not None:
            out.append(norm)
        elif layer in attn:
            out.append(attn[layer])
        else:
            raise HomespecError(f"feature layer {layer} has no module in this {n_layer}-layer model",
                                hint="the draft head was trained for a different target model")
    return out


def additive_mask(allowed: "torch.Tensor") -> "torch.Tensor":
    """[T, W] bool -> [1, 1, T, W] float16: 0 where attention is allowed, MASKED elsewhere."""
    import torch

    out = torch.zeros(allowed.shape, dtype=torch.float16, device=allowed.device)
    return out.masked_fill_(~allowed, MASKED)[None, None]


def causal_parents(t: int) -> list[int]:
    return list(range(-1, t - 1))


@dataclass(frozen=True, slots=True)
class RopePatch:
    """Rows [start, start+n) of a RoPE table temporarily hold the rows of `positions`."""

    start: int
    positions: tuple[int, ...]

    def apply(self, table: "torch.Tensor", original: "torch.Tensor") -> None:
        # tables are [1, 1, max_seq, D] (exllamav2/device.py prepare_sincos)
        import torch

        src = torch.as_tensor(self.positions, device=table.device)
        table[..., self.start:self.start + len(self.positions), :] = original[..., src, :]

    def restore(self, table: "torch.Tensor", original: "torch.Tensor") -> None:
        end = self.start + len(self.positions)
        table[..., self.start:end, :] = original[..., self.start:end, :]


def commit_plan(path: Sequence[int], q_block: int) -> str:
    """How to keep `path` (node indices, root first) in the cache:

    "advance": the path is nodes 0..n-1, already in place;
    "copy": move rows (FP16 cache, or a quantised cache whose blocks are one token);
    "recompute": a quantised cache that quantises several tokens together cannot move single
    rows, so the accepted tokens are evaluated again as a chain (same tokens, same positions)."""
    if list(path) == list(range(len(path))):
        return "advance"
    return "copy" if q_block <= 1 else "recompute"

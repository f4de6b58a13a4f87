"""A Llama-family decoder (Llama, Mistral, Qwen2, SmolLM2) in plain torch, built for speculative decoding.

* Static KV cache, preallocated: k and v are [n_layer, n_head_kv, max_ctx, head_dim]. Slots
  [0, n_past) hold committed tokens; a forward writes its new tokens to [n_past, n_past + T)
  without committing them.
* Tree attention: new token j attends to every committed slot and to the new tokens its
  ancestor mask allows (homespec.contracts.tree.ancestor_mask); positions are explicit (a tree
  node sits at n_past + depth).
* Feature capture: the hidden state *entering* chosen layers (EAGLE-3 reads layers 2, N//2, N-3).
* Compaction moves an accepted tree path into contiguous slots; rollback just lowers n_past
  (stale slots beyond n_past are never attended).

Weights use Hugging Face layout and RoPE (rotate_half: dim i pairs with i + head_dim/2); GGUF
loaders undo llama.cpp's q/k permutation before handing weights here (see nets/load.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F

from homespec.errors import ContractError, HomespecError
from homespec.kernels import compact_kv  # one launch on a GPU; the torch reference elsewhere
from homespec.nets.config import LlamaConfig


@dataclass(frozen=True, slots=True)
class LayerWeights:
    attn_norm: torch.Tensor  # [H]
    wq: torch.Tensor  # [n_head*D, H]
    wk: torch.Tensor  # [n_head_kv*D, H]
    wv: torch.Tensor  # [n_head_kv*D, H]
    wo: torch.Tensor  # [H, n_head*D]
    ffn_norm: torch.Tensor  # [H]
    w_gate: torch.Tensor  # [F, H]
    w_up: torch.Tensor  # [F, H]
    w_down: torch.Tensor  # [H, F]
    bq: torch.Tensor | None = None
    bk: torch.Tensor | None = None
    bv: torch.Tensor | None = None
    bo: torch.Tensor | None = None
    b_gate: torch.Tensor | None = None
    b_up: torch.Tensor | None = None
    b_down: torch.Tensor | None = None


@dataclass(frozen=True, slots=True)
class ForwardOut:
    logits: torch.Tensor  # [R, V] float32 for the requested rows
    features: torch.Tensor | None  # [T, k*H] captured layer inputs, in the requested order


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # statistics in fp32 even for half-precision activations, as the reference implementations do
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * y.to(x.dtype)


def rope_inv_freq(cfg: LlamaConfig, device: str | torch.device) -> torch.Tensor:
    """[D/2] float32 rotary frequencies, divided by the Llama-3 factors when the model has them."""
    d = cfg.head_dim
    # float32 throughout, the same rounding as the Hugging Face reference
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device=device).float() / d))
    factors = cfg.rope_factors
    if factors is not None:
        inv = inv / torch.tensor(factors, dtype=torch.float32, device=device)
    return inv


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope_tables(positions: torch.Tensor, inv_freq: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin [T, 1, D] of the rotary embedding at `positions` ([T] int64)."""
    freqs = positions.float()[:, None] * inv_freq[None, :]  # [T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [T, D]
    return emb.cos().to(dtype)[:, None, :], emb.sin().to(dtype)[:, None, :]


def project_qkv(lw: LayerWeights, x: torch.Tensor, cfg: LlamaConfig, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer's attention inputs for hidden states x [T, H]: q [T, nh, D], k and v [T, nkv, D],
    q and k rotated."""
    t, d = x.shape[0], cfg.head_dim
    h = rms_norm(x, lw.attn_norm, cfg.rms_eps)
    q = F.linear(h, lw.wq, lw.bq).view(t, cfg.n_head, d)
    k = F.linear(h, lw.wk, lw.bk).view(t, cfg.n_head_kv, d)
    v = F.linear(h, lw.wv, lw.bv).view(t, cfg.n_head_kv, d)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v


def feed_forward(lw: LayerWeights, x: torch.Tensor, cfg: LlamaConfig) -> torch.Tensor:
    """x plus the layer's SwiGLU block of its normed self."""
    h = rms_norm(x, lw.ffn_norm, cfg.rms_eps)
    return x + F.linear(F.silu(F.linear(h, lw.w_gate, lw.b_gate)) * F.linear(h, lw.w_up, lw.b_up), lw.w_down, lw.b_down)


class LlamaModel:
    def __init__(
        self,
        cfg: LlamaConfig,
        embed: torch.Tensor,
        layers: Sequence[LayerWeights],
        norm: torch.Tensor,
        lm_head: torch.Tensor,
        *,
        max_context: int,
    ):
        self.cfg = cfg
        self.embed = embed  # [V, H]
        self.layers = tuple(layers)
        self.norm = norm  # [H]
        self.lm_head = lm_head  # [V, H]; the same tensor as embed when tied
        self.device = embed.device
        self.dtype = embed.dtype
        self.max_context = max_context
        self.inv_freq = rope_inv_freq(cfg, self.device)  # [D/2]
        # head-major, so the [Hkv, n, D] slice attention reads has contiguous rows (a
        # [n, Hkv, D] slice transposed made CPU attention an order of magnitude slower)
        shape = (cfg.n_layer, cfg.n_head_kv, max_context, cfg.head_dim)
        self.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)  # [L, Hkv, C, D]
        self.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)  # [L, Hkv, C, D]
        self.n_past = 0

    # --- sizes -----------------------------------------------------------------------------

    def weight_bytes(self) -> int:
        seen: set[int] = set()
        total = 0
        tensors = [self.embed, self.norm, self.lm_head]
        for layer in self.layers:
            tensors += [t for t in (getattr(layer, f) for f in LayerWeights.__slots__) if t is not None]
        for t in tensors:
            if t.data_ptr() not in seen:  # a tied lm_head is counted once
                seen.add(t.data_ptr())
                total += t.numel() * t.element_size()
        return total

    def kv_bytes(self) -> int:
        return 2 * self.k_cache.numel() * self.k_cache.element_size()

    # --- the forward pass ------------------------------------------------------------------

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        tree_mask: torch.Tensor | None = None,
        *,
        capture: Sequence[int] = (),
        logits_rows: slice | torch.Tensor | None = None,
    ) -> ForwardOut:
        """Run `tokens` ([T] int64) after the committed cache, writing their KV to slots
        [n_past, n_past+T) without committing them.

        positions: [T] int64 rotary positions (default n_past..n_past+T-1).
        tree_mask: [T, T] bool, row j = which new tokens j may attend (itself and its ancestors);
                   default causal.
        capture: layers whose input hidden states are returned as features [T, len(capture)*H].
        logits_rows: which rows get logits (default all).
        """
        cfg = self.cfg
        t = int(tokens.shape[0])
        start = self.n_past
        end = start + t
        if end > self.max_context:
            raise HomespecError(
                f"context full: {end} tokens would exceed the context of {self.max_context}",
                hint="start a new conversation or load the model with a larger --ctx",
            )
        tokens = tokens.to(self.device)
        if positions is None:
            positions = torch.arange(start, end, device=self.device)
        positions = positions.to(self.device)

        # attention mask over slots [0, end): committed slots always visible; new ones per tree/causal
        mask = torch.ones(t, end, dtype=torch.bool, device=self.device)  # [T, end]
        if tree_mask is None:
            mask[:, start:] = torch.ones(t, t, dtype=torch.bool, device=self.device).tril()
        else:
            mask[:, start:] = tree_mask.to(self.device)

        cos, sin = rope_tables(positions, self.inv_freq, self.dtype)  # [T, 1, D]

        x = self.embed[tokens]  # [T, H]
        wanted: dict[int, list[int]] = {}  # layer -> slots in the feature list (a layer may repeat)
        for slot, layer in enumerate(capture):
            wanted.setdefault(layer, []).append(slot)
        feats: list[torch.Tensor | None] = [None] * len(capture)
        nh, nkv, d = cfg.n_head, cfg.n_head_kv, cfg.head_dim
        for i, lw in enumerate(self.layers):
            for slot in wanted.get(i, ()):
                feats[slot] = x
            q, k, v = project_qkv(lw, x, cfg, cos, sin)  # [T, nh, D], [T, nkv, D] x 2
            self.k_cache[i, :, start:end] = k.transpose(0, 1)
            self.v_cache[i, :, start:end] = v.transpose(0, 1)
            keys = self.k_cache[i, :, :end]  # [nkv, end, D]
            vals = self.v_cache[i, :, :end]
            attn = F.scaled_dot_product_attention(
                q.transpose(0, 1), keys, vals, attn_mask=mask, enable_gqa=nkv != nh
            )  # [nh, T, D]
            x = x + F.linear(attn.transpose(0, 1).reshape(t, nh * d), lw.wo, lw.bo)
            x = feed_forward(lw, x, cfg)
        for slot in wanted.get(len(self.layers), ()):  # "input of layer N": the last output, before the final norm
            feats[slot] = x

        rows = x if logits_rows is None else x[logits_rows]
        logits = F.linear(rms_norm(rows, self.norm, cfg.rms_eps), self.lm_head).float()  # [R, V]
        features = torch.cat(feats, dim=-1) if capture else None  # [T, k*H]
        return ForwardOut(logits=logits, features=features)

    # --- cache bookkeeping -----------------------------------------------------------------

    def commit(self, n: int) -> None:
        """Accept the first n tokens of the last forward as they were laid out (a causal chain)."""
        self.n_past += n

    def commit_path(self, nodes: Sequence[int]) -> None:
        """Keep the new tokens at `nodes` (indices into the last forward, root first) in
        contiguous slots n_past.. and drop the others. A node at depth j was rotated for position
        n_past + j, which is exactly the slot it moves to, so no re-rotation is needed."""
        n = len(nodes)
        if n == 0:
            return
        if self.n_past + n > self.max_context:
            raise HomespecError("context full while committing", hint="start a new conversation or use a larger --ctx")
        if list(nodes) != list(range(n)):
            compact_kv(self.k_cache, self.v_cache, self.n_past, torch.as_tensor(list(nodes), dtype=torch.long))
        self.n_past += n

    def rollback(self, n: int) -> None:
        if n < 0 or n > self.n_past:
            raise ContractError(f"cannot roll back {n} of {self.n_past} committed tokens", hint="this is a bug in the caller")
        self.n_past -= n

    def reset(self) -> None:
        self.n_past = 0

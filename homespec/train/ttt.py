"""EAGLE-3's training-time test (TTT): the head is unrolled on its own outputs during training.

Sources: Li et al., "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via
Training-Time Test" (arXiv 2503.01840), and SafeAILab/EAGLE `eagle/traineagle3/cnets.py`.

Entry j of a sequence pairs the target feature at position j with the token at j+1. At unroll
step k the entry consumes the token at j+1+k and, instead of a target feature, the head's own
output of step k-1 at the same entry (EAGLE-3.1's norm_output: its final-normed output); it
predicts the token at j+2+k. Attention at step k, for the query of entry j:

    step-0 keys of entries 0..j   (causal: the committed context, computed from target features)
    step-l keys of entry j only   (l = 1..k: its own earlier draft steps, the "diagonal")

which is exactly what the drafter sees at tree depth k (homespec.nets.eagle3_drafter), with
the same RoPE positions (entry j at step k sits at position j+k). The loss of step k is the soft
cross-entropy against the target's softmax over the draft vocabulary, weighted 0.8^k; label
positions that are not reply tokens, or whose target argmax (the reply token itself, the data
being greedy) is outside the draft vocabulary, are masked.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from homespec.nets.eagle3 import Eagle3Head

STEP_DECAY = 0.8  # EAGLE-3 traineagle3: weight of unroll step k is 0.8**k


@dataclass(frozen=True, slots=True)
class Batch:
    tokens: torch.Tensor  # [B, T] int64 target ids (0 past each sequence's end)
    features: torch.Tensor  # [B, T, 3*H_t] target features
    hidden: torch.Tensor  # [B, T, H_t] target result_norm
    generated: torch.Tensor  # [B, T] bool: a reply token
    lengths: torch.Tensor  # [B] int64

    def to(self, device: str | torch.device) -> "Batch":
        return Batch(*(t.to(device) for t in (self.tokens, self.features, self.hidden, self.generated, self.lengths)))


@dataclass(frozen=True, slots=True)
class TTTOut:
    loss: torch.Tensor  # scalar: sum_k 0.8^k * loss_k
    step_loss: tuple[float, ...]  # per unroll step
    step_acc: tuple[float, ...]  # top-1 accuracy per step on unmasked positions
    step_count: tuple[int, ...]  # unmasked positions per step


class Frozen:
    """The target's tensors the head needs at train time, never trained."""

    def __init__(self, embed: torch.Tensor, output: torch.Tensor, draft_ids: torch.Tensor) -> None:
        self.embed = embed  # [V, H] token embeddings (the head's inputs)
        self.output_draft = output[draft_ids].contiguous()  # [V_draft, H] output rows of the draft vocab
        self.draft_of = torch.full((embed.shape[0],), -1, dtype=torch.int64)  # [V] draft id or -1
        self.draft_of[draft_ids] = torch.arange(draft_ids.shape[0])

    def to(self, device: str | torch.device) -> "Frozen":
        out = object.__new__(Frozen)
        out.embed, out.output_draft, out.draft_of = self.embed.to(device), self.output_draft.to(device), self.draft_of.to(device)
        return out


def _shift(x: torch.Tensor, n: int, fill: float | int | bool = 0) -> torch.Tensor:
    """x[:, i + n] at i (dim 1), padded with `fill` at the end."""
    if n == 0:
        return x
    pad = torch.full_like(x[:, :n], fill)
    return torch.cat([x[:, n:], pad], 1)


def ttt_loss(head: Eagle3Head, frozen: Frozen, batch: Batch, steps: int, hidden_weight: float = 0.0) -> TTTOut:
    """Unroll the head `steps` times over a padded batch and return the weighted loss.

    hidden_weight > 0 adds, per step, a smooth-L1 regression of the head's normed output onto the
    target's final normed hidden state at the same position (EAGLE-1's feature loss): the state
    the target's own read-out turns into the distribution the soft cross-entropy matches: H numbers
    of supervision per position (576 for SmolLM2) besides one distribution, keeping the head in the
    target's hidden space. Meant as a regulariser for small data; docs/training.md has the one
    measurement so far (no difference in an under-fitted run)."""
    B, T = batch.tokens.shape
    dev = batch.tokens.device
    layer, attn = head.midlayer, head.midlayer.self_attn
    h, kv, d = attn.n_head, attn.n_kv, attn.head_dim
    dtype = head.fc.weight.dtype
    valid_pos = torch.arange(T, device=dev)[None, :] < batch.lengths[:, None]  # [B, T]
    causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()  # [T, T]
    with torch.no_grad():
        # the target's distribution at each position over the draft vocab: [B, T, V_draft]
        target_p = torch.softmax(batch.hidden.float() @ frozen.output_draft.float().T, -1)
        label_draft = frozen.draft_of[batch.tokens]  # [B, T] draft id of each token, -1 if none
        label_ok = valid_pos & batch.generated & (label_draft >= 0)  # [B, T]

    hidden = head.project(batch.features)  # [B, T, H]
    keys: list[tuple[torch.Tensor, torch.Tensor]] = []  # (K, V) per step, [B, h, T, d]
    losses, accs, counts = [], [], []
    total = torch.zeros((), device=dev)
    for k in range(steps):
        emb = frozen.embed[_shift(batch.tokens, 1 + k)].to(dtype)  # [B, T, H]: token j+1+k
        pos = (torch.arange(T, device=dev) + k).repeat(B)  # [B*T]
        residual = layer.hidden_norm(hidden) if head.config.norm_before_residual else hidden
        x = torch.cat([layer.input_layernorm(emb), layer.hidden_norm(hidden)], -1)  # [B, T, 2H]
        q = attn._rope(attn.q_proj(x).view(B * T, h, d), pos).view(B, T, h, d).transpose(1, 2)  # [B, h, T, d]
        kk = attn._rope(attn.k_proj(x).view(B * T, kv, d), pos).view(B, T, kv, d).transpose(1, 2)  # [B, kv, T, d]
        vv = attn.v_proj(x).view(B, T, kv, d).transpose(1, 2)
        keys.append((kk.repeat_interleave(h // kv, 1), vv.repeat_interleave(h // kv, 1)))
        o = _attend(q, keys, causal)  # [B, h, T, d]
        out = residual + attn.o_proj(o.transpose(1, 2).reshape(B, T, h * d))
        out = out + layer.mlp(layer.post_attention_layernorm(out))  # [B, T, H]
        normed = head.norm(out)

        # entry j at step k predicts position j+2+k from the target's state at j+1+k; the draft
        # lm_head and the loss run on the counted entries only (prompt tokens, padding and labels
        # outside the draft vocabulary never reach the [n, V_draft] read-out)
        bi, ji = _shift(label_ok, 2 + k, False).nonzero(as_tuple=True)
        n = int(bi.shape[0])
        if n:
            logq = head.log_probs(normed[bi, ji])  # [n, V_draft] float32
            p = target_p[bi, ji + 1 + k]  # [n, V_draft]
            loss_k = -(p * logq).sum(-1).mean()
            if hidden_weight:
                want = batch.hidden[bi, ji + 1 + k].to(normed.dtype)  # [n, H]
                loss_k = loss_k + hidden_weight * nn.functional.smooth_l1_loss(normed[bi, ji], want)
            acc = (logq.argmax(-1) == label_draft[bi, ji + 2 + k]).float().mean()
        else:
            loss_k = normed.sum() * 0.0
            acc = torch.zeros(())
        total = total + STEP_DECAY**k * loss_k
        losses.append(float(loss_k.detach()))
        accs.append(float(acc))
        counts.append(n)
        hidden = head.next_hidden(out, normed)
    return TTTOut(total, tuple(losses), tuple(accs), tuple(counts))


def _attend(q: torch.Tensor, keys: list[tuple[torch.Tensor, torch.Tensor]], causal: torch.Tensor) -> torch.Tensor:
    """Attention of step len(keys)-1: causal over step 0, diagonal over steps 1.. (one softmax)."""
    scale = q.shape[-1] ** -0.5
    K0, V0 = keys[0]
    s0 = (q @ K0.transpose(-1, -2)) * scale  # [B, h, T, T]
    s0 = s0.masked_fill(~causal, float("-inf"))
    diag = [(q * K).sum(-1, keepdim=True) * scale for K, _ in keys[1:]]  # each [B, h, T, 1]
    a = torch.softmax(torch.cat([s0, *diag], -1).float(), -1).to(q.dtype)  # [B, h, T, T + k]
    T = q.shape[2]
    out = a[..., :T] @ V0
    for i, (_, V) in enumerate(keys[1:]):
        out = out + a[..., T + i : T + i + 1] * V
    return out


def init_lm_head(head: Eagle3Head, frozen: Frozen) -> None:
    """Start the draft lm_head from the target's output rows of the draft vocabulary: the head's
    normed output is trained to stand in for the target's normed hidden state, so these rows
    are already the right read-out (the head starts near 'predict what the target would')."""
    with torch.no_grad():
        if head.lm_head.weight.shape == frozen.output_draft.shape:
            head.lm_head.weight.copy_(frozen.output_draft.to(head.lm_head.weight))


def trainable(head: Eagle3Head, freeze_lm_head: bool = False) -> list[nn.Parameter]:
    """Everything except embeddings the head might carry (those are the target's, frozen) and,
    with `freeze_lm_head`, the draft lm_head (it then stays the target's own output rows of the
    draft vocabulary, see init_lm_head: 4.7M fewer parameters to fit on SmolLM2)."""
    skip = ("embed_tokens", "lm_head") if freeze_lm_head else ("embed_tokens",)
    return [p for name, p in head.named_parameters() if not name.startswith(skip)]

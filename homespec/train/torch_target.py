"""The target on homespec's torch backend as the data generator sees it: many sequences at once.

`BatchedTorchTarget` has the decode interface of `homespec.backends.llamacpp.batched.BatchedLlamaTarget`
(rows of any mix of sequences in, per-row features and final normed hidden states out, the
greedy next token of each sequence's last row), over the weights of `homespec.nets.llama`.
Each sequence owns `n_ctx / n_parallel` KV cells. One call runs every row through the dense
parts of the network together (one [N, H] matmul per weight), and attention per sequence:
the sequences that add one row (the decode steps) in one batched attention over all caches,
a sequence that adds several (a prompt, the next user turn) on its own with a causal mask.

Why: a one-sequence step leaves most of the hardware idle, and reply tokens per second grow
several-fold with the number of sequences decoded together (docs/training.md has the measured
rates). Only the last row of each sequence goes through the output matrix (training recomputes
logits from the stored hidden state). Numbers match one-sequence prefill to fp32 rounding
(tests/train/test_train.py).

Imported lazily (by homespec.train.data only).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from homespec.backends.llamacpp.batched import DecodeOut
from homespec.errors import HomespecError


class BatchedTorchTarget:
    def __init__(self, model_path: str, *, feature_layers: Sequence[int], n_parallel: int, n_ctx: int,
                 device: str | None = None) -> None:
        import torch

        from homespec.backends.torch.backend import TorchBackend  # torch side, like the import above

        # the weights only: this class keeps its own per-sequence caches
        self._m = m = TorchBackend.load(model_path, device=device, max_context=1).model
        cfg = m.cfg
        self.n_layer, self.n_embd, self.n_vocab = cfg.n_layer, cfg.n_embd, cfg.n_vocab
        bad = [i for i in feature_layers if not 0 <= i <= cfg.n_layer]
        if bad:
            raise HomespecError(f"feature layers {bad} are outside 0..{cfg.n_layer}", hint="this is a bug in the caller")
        self._feature_layers = tuple(int(i) for i in feature_layers)
        self.n_parallel = max(1, int(n_parallel))
        self.n_ctx = int(n_ctx)
        self._cells = self.n_ctx // self.n_parallel
        shape = (cfg.n_layer, self.n_parallel, cfg.n_head_kv, self._cells, cfg.head_dim)
        self._k = torch.zeros(shape, dtype=m.dtype, device=m.device)  # [L, S, Hkv, C, D]
        self._v = torch.zeros(shape, dtype=m.dtype, device=m.device)
        self._len = [0] * self.n_parallel  # cells in use per sequence

    def decode(self, rows):  # rows: Sequence[homespec.backends.llamacpp.batched.Row]
        import torch

        with torch.inference_mode():
            return DecodeOut(*self._decode(rows))

    def _decode(self, rows):
        import torch
        import torch.nn.functional as F

        from homespec.nets.llama import rms_norm, rope_tables  # torch side, like the import above

        m = self._m
        dev = m.device
        runs = self._runs(rows)  # seq -> its rows, in order; each run continues its sequence's cache
        order = [i for idx in runs.values() for i in idx]  # rows grouped by sequence
        tokens = torch.as_tensor([rows[i].token for i in order], dtype=torch.long, device=dev)
        positions = torch.as_tensor([rows[i].pos for i in order], dtype=torch.long, device=dev)
        cos, sin = rope_tables(positions, m.inv_freq, m.dtype)  # [N, 1, D]

        # runs as (seq, first row in `order`, length, first position)
        spans, at = [], 0
        for seq, idx in runs.items():
            spans.append((seq, at, len(idx), self._len[seq]))
            at += len(idx)
        feats, x = self._forward_layers(m.embed[tokens], cos, sin, spans)  # x: [N, H]
        hidden = rms_norm(x, m.norm, m.cfg.rms_eps)  # [N, H]: result_norm
        ends = torch.as_tensor([r0 + t - 1 for _, r0, t, _ in spans], device=dev)  # each sequence's last row
        nxt = torch.argmax(F.linear(hidden[ends], m.lm_head).float(), dim=-1).tolist()
        for seq, _, t, _ in spans:
            self._len[seq] += t

        n = len(order)
        back = torch.empty(n, dtype=torch.long, device=dev)  # batch order from grouped order
        back[torch.as_tensor(order, device=dev)] = torch.arange(n, device=dev)
        features = torch.cat(feats, dim=-1)[back].float().cpu().numpy() if feats else np.empty((n, 0), np.float32)
        hidden_np = hidden[back].float().cpu().numpy()
        return features, hidden_np, {seq: int(t) for (seq, *_), t in zip(spans, nxt)}

    def _runs(self, rows) -> dict[int, list[int]]:
        """The rows of each sequence, in order, checked to continue that sequence's cache."""
        runs: dict[int, list[int]] = {}
        for i, r in enumerate(rows):
            runs.setdefault(r.seq, []).append(i)
        for seq, idx in runs.items():
            if not 0 <= seq < self.n_parallel:
                raise HomespecError(f"sequence {seq} is outside 0..{self.n_parallel - 1}", hint="this is a bug in the caller")
            pos = [rows[i].pos for i in idx]
            if pos != list(range(self._len[seq], self._len[seq] + len(idx))):
                raise HomespecError(f"sequence {seq}: rows at positions {pos[0]}.. do not continue its {self._len[seq]} "
                                    f"cached positions", hint="this is a bug in the caller")
            if self._len[seq] + len(idx) > self._cells:
                raise HomespecError(f"sequence {seq} would exceed its {self._cells} KV cells",
                                    hint="lower --max-new-tokens or raise the per-sequence budget")
        return runs

    def _forward_layers(self, x, cos, sin, spans):
        """Every decoder layer over the rows x [N, H], writing each run's K/V into its sequence's
        cells; returns the captured features (one [N, H] per requested layer) and the last hidden state."""
        import torch
        import torch.nn.functional as F

        from homespec.nets.llama import feed_forward, project_qkv  # torch side, like the import above

        m, cfg = self._m, self._m.cfg
        ones = [s for s in spans if s[2] == 1]
        many = [s for s in spans if s[2] > 1]
        single = self._single_rows(ones) if ones else None
        wanted: dict[int, list[int]] = {}
        for slot, layer in enumerate(self._feature_layers):
            wanted.setdefault(layer, []).append(slot)
        feats: list = [None] * len(self._feature_layers)
        n, nh, d = x.shape[0], cfg.n_head, cfg.head_dim
        for li, lw in enumerate(m.layers):
            for slot in wanted.get(li, ()):
                feats[slot] = x
            q, k, v = project_qkv(lw, x, cfg, cos, sin)
            kc, vc = self._k[li], self._v[li]  # [S, Hkv, C, D]
            attn = torch.empty(n, nh, d, dtype=m.dtype, device=m.device)
            if single is not None:
                self._attend_single(q, k, v, kc, vc, single, attn)
            for seq, r0, t, p0 in many:
                self._attend_run(q, k, v, kc, vc, (seq, r0, t, p0), attn)
            x = feed_forward(lw, x + F.linear(attn.reshape(n, nh * d), lw.wo, lw.bo), cfg)
        for slot in wanted.get(len(m.layers), ()):
            feats[slot] = x
        return feats, x

    def _single_rows(self, ones):
        """Index tensors for the sequences that add one row: (slot, row, position, cells to attend, mask)."""
        import torch

        dev = self._m.device
        # one query per sequence slot, over a view of every slot's cells: gathering the B
        # active caches instead copies B x E cells per layer and step (most of a step's time)
        one_seq = torch.as_tensor([s[0] for s in ones], device=dev)
        one_row = torch.as_tensor([s[1] for s in ones], device=dev)
        one_pos = torch.as_tensor([s[3] for s in ones], device=dev)
        one_end = int(one_pos.max()) + 1  # cells to attend: up to the longest one's new row
        last = torch.zeros(self.n_parallel, dtype=torch.long, device=dev)  # idle slots: cell 0 only
        last[one_seq] = one_pos
        one_mask = (torch.arange(one_end, device=dev)[None, :] <= last[:, None])[:, None, None, :]  # [S,1,1,E]
        return one_seq, one_row, one_pos, one_end, one_mask

    def _attend_single(self, q, k, v, kc, vc, single, attn) -> None:
        """One batched attention for every sequence that adds one row, over all slots' caches."""
        import torch

        one_seq, one_row, one_pos, one_end, one_mask = single
        cfg = self._m.cfg
        nh, nkv, d = cfg.n_head, cfg.n_head_kv, cfg.head_dim
        kc[one_seq, :, one_pos] = k[one_row]
        vc[one_seq, :, one_pos] = v[one_row]
        # plain matmuls, the query heads of one KV head side by side: [S, Hkv, nh/Hkv, D]
        qs = q.new_zeros(self.n_parallel, nh, d)
        qs[one_seq] = q[one_row]
        qs = qs.view(self.n_parallel, nkv, nh // nkv, d)
        scores = torch.matmul(qs, kc[:, :, :one_end].transpose(-1, -2)) * d ** -0.5  # [S, Hkv, G, E]
        scores = scores.float().masked_fill(~one_mask, float("-inf")).softmax(-1).to(self._m.dtype)
        o = torch.matmul(scores, vc[:, :, :one_end]).view(self.n_parallel, nh, d)  # [S, nh, D]
        attn[one_row] = o[one_seq]

    def _attend_run(self, q, k, v, kc, vc, span, attn) -> None:
        """A sequence that adds several rows (a prompt, a next turn): causal attention on its own."""
        import torch
        import torch.nn.functional as F

        seq, r0, t, p0 = span
        dev = self._m.device
        kc[seq, :, p0:p0 + t] = k[r0:r0 + t].transpose(0, 1)
        vc[seq, :, p0:p0 + t] = v[r0:r0 + t].transpose(0, 1)
        mask = torch.ones(t, p0 + t, dtype=torch.bool, device=dev)
        mask[:, p0:] = torch.ones(t, t, dtype=torch.bool, device=dev).tril()
        o = F.scaled_dot_product_attention(q[r0:r0 + t].transpose(0, 1), kc[seq, :, :p0 + t], vc[seq, :, :p0 + t],
                                           attn_mask=mask, enable_gqa=self._m.cfg.n_head_kv != self._m.cfg.n_head)
        attn[r0:r0 + t] = o.transpose(0, 1)

    def drop(self, seq: int, from_pos: int = 0) -> None:
        """Forget sequence `seq` from position `from_pos` on."""
        self._len[seq] = min(self._len[seq], max(0, int(from_pos)))

    def clear(self) -> None:
        self._len = [0] * self.n_parallel

    def close(self) -> None:
        self._k = self._v = None

"""Training batches from memory-mapped shards: length-bucketed, padded, seeded per epoch.

An epoch's batch order depends only on (seed, epoch), so a resumed run skips the batches it has
already trained on and continues with the very same ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from homespec.train.shards import Shard
from homespec.train.ttt import Batch

_BUCKET = 64  # sequences sorted by length together, so a batch pads little


@dataclass(frozen=True, slots=True)
class SeqRef:
    shard: int
    start: int
    length: int


def sequence_refs(shards: Sequence[Shard], max_len: int) -> list[SeqRef]:
    """Every stored sequence that has a reply token, cut to its first max_len positions."""
    refs = []
    for i, sh in enumerate(shards):
        off = np.asarray(sh.offsets)
        gen = np.asarray(sh.generated)
        for s in range(sh.n_seq):
            a, b = int(off[s]), int(off[s + 1])
            n = min(b - a, max_len)
            if n >= 3 and gen[a + 2 : a + n].any():
                refs.append(SeqRef(i, a, n))
    return refs


def epoch_plan(refs: Sequence[SeqRef], seed: int, epoch: int, batch_tokens: int) -> list[list[int]]:
    """Batches of indices into refs: shuffled, then length-sorted within buckets, then the
    batches themselves shuffled; a batch holds at most batch_tokens padded positions."""
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(len(refs))
    batches: list[list[int]] = []
    for lo in range(0, len(perm), _BUCKET):
        bucket = sorted(perm[lo : lo + _BUCKET].tolist(), key=lambda i: refs[i].length)
        cur: list[int] = []
        for i in bucket:
            longest = max([refs[j].length for j in cur] + [refs[i].length])
            if cur and longest * (len(cur) + 1) > batch_tokens:
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
    order = rng.permutation(len(batches))
    return [batches[i] for i in order]


def collate(shards: Sequence[Shard], refs: Sequence[SeqRef], idx: Sequence[int]) -> Batch:
    items = [refs[i] for i in idx]
    B, T = len(items), max(r.length for r in items)
    sh0 = shards[items[0].shard]
    F, H = sh0.features.shape[1], sh0.hidden.shape[1]
    tokens = np.zeros((B, T), np.int64)
    feats = np.zeros((B, T, F), np.float32)
    hidden = np.zeros((B, T, H), np.float32)
    gen = np.zeros((B, T), bool)
    for b, r in enumerate(items):
        sh, sl = shards[r.shard], slice(r.start, r.start + r.length)
        tokens[b, : r.length] = sh.tokens[sl]
        feats[b, : r.length] = sh.features[sl]
        hidden[b, : r.length] = sh.hidden[sl]
        gen[b, : r.length] = sh.generated[sl]
    return Batch(torch.from_numpy(tokens), torch.from_numpy(feats), torch.from_numpy(hidden), torch.from_numpy(gen),
                 torch.tensor([r.length for r in items], dtype=torch.int64))


def iterate(shards: Sequence[Shard], refs: Sequence[SeqRef], plan: list[list[int]], skip: int) -> Iterator[tuple[int, Batch]]:
    for i in range(skip, len(plan)):
        yield i, collate(shards, refs, plan[i])

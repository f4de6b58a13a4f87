"""Does an exported eagle3 GGUF draft, in llama.cpp, what the head drafts in homespec?

For each context both sides draft a greedy chain of k tokens after the target's next token:
homespec's EAGLE-3 drafter (homespec.speculative.drafters.eagle3_torch, a chain: topk 1, full
attention) on the llamacpp backend, and llama.cpp's own eagle3 graph on the exported file
(homespec.heads.llamacpp_draft). The two agree token for token unless a step's top two draft
logits are closer than the float noise between them (fp16-rounded embeddings in homespec, the
GGUF's matrices in llama.cpp): such a step is reported with its margin, not hidden.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from homespec.backends.llamacpp.backend import LlamaCppBackend
from homespec.backends.settings import BackendSettings
from homespec.heads.llamacpp_draft import LlamaCppEagle3

if TYPE_CHECKING:
    from homespec.nets.eagle3 import Eagle3Head


@dataclass(frozen=True, slots=True)
class ChainPair:
    context_len: int
    homespec: list[int]
    llamacpp: list[int]
    margin: float  # llama.cpp's top-1 minus top-2 logit at the first differing step (inf: none differ)

    @property
    def agree(self) -> int:
        """Leading tokens both chains share."""
        n = 0
        for a, b in zip(self.homespec, self.llamacpp):
            if a != b:
                break
            n += 1
        return n


def homespec_chains(head: "Eagle3Head", target: str | os.PathLike[str], contexts: Sequence[Sequence[int]],
                    k: int) -> list[list[int]]:
    # torch side: only homespec's half of the comparison drafts in torch
    from homespec.speculative.drafters.eagle3_torch import Eagle3Drafter

    out = []
    n_ctx = max(len(c) for c in contexts) + k + 8
    with LlamaCppBackend(os.fspath(target), BackendSettings(n_ctx=max(256, n_ctx))) as backend:
        drafter = Eagle3Drafter(head, backend, depth=k, topk=1, total=k + 1, window=None)
        for ctx in contexts:
            backend.reset()
            fwd = backend.prefill(ctx)
            drafter.begin(ctx, fwd)
            root = int(fwd.logits[-1].argmax())
            tree = drafter.propose(root, ctx)
            out.append([int(t) for t in tree.tokens[1:]])
    return out


def compare_chains(head: "Eagle3Head", target: str | os.PathLike[str], draft_gguf: str | os.PathLike[str],
                   contexts: Sequence[Sequence[int]], k: int = 4) -> list[ChainPair]:
    """Both sides' greedy k-token chains for every context (module docstring)."""
    ours = homespec_chains(head, target, contexts, k)
    pairs = []
    n_ctx = max(256, max(len(c) for c in contexts) + k + 8)
    with LlamaCppEagle3(target, draft_gguf, n_ctx=n_ctx) as theirs:
        for ctx, mine in zip(contexts, ours):
            chain = theirs.draft(ctx, k)
            margin = float("inf")
            for step, (a, b) in enumerate(zip(mine, chain.tokens)):
                if a != b:
                    top = np.sort(chain.logits[step])[-2:]
                    margin = float(top[1] - top[0])
                    break
            pairs.append(ChainPair(len(ctx), mine, chain.tokens, margin))
    return pairs


# --- the head's graph, step by step: logits beside llama.cpp's ------------------------------------


@dataclass(frozen=True, slots=True)
class StepPair:
    """One context's greedy chain drafted by the torch head and by llama.cpp's eagle3 graph from the
    same target features, with both sides' draft logits (target vocabulary, draft ids only)."""

    context_len: int
    torch_tokens: list[int]
    llamacpp_tokens: list[int]
    max_abs: float  # largest |torch - llama.cpp| draft logit over the steps both sides took alike
    scale: float  # largest |torch| draft logit there: max_abs / scale is the relative error

    @property
    def agree(self) -> int:
        return ChainPair(self.context_len, self.torch_tokens, self.llamacpp_tokens, 0.0).agree


def reference_chain(head: "Eagle3Head", embed: np.ndarray, feats: np.ndarray, tokens: Sequence[int], root: int,
                    k: int) -> tuple[list[int], np.ndarray]:
    """The torch head's greedy chain of k tokens after `tokens` + `root`, computed as llama.cpp's
    drafter computes it (homespec.heads.llamacpp_draft): g = project(features); the context's KV from
    (token[p+1], g[p]) at p; the seed (root, g[n-1]) at n-1; then each step's argmax and the hidden
    state next_hidden() picks (EAGLE-3: the raw output; EAGLE-3.1 with norm_output: its norm).
    `embed` [V, H] are the target's token embeddings. -> (tokens, logits [k, V] with -inf off the
    draft vocabulary)."""
    import torch

    n, c = len(tokens), head.config
    dt = head.fc.weight.dtype
    to_target = head.draft_to_target.cpu().numpy()
    with torch.no_grad():
        emb = lambda ids: torch.from_numpy(np.ascontiguousarray(embed[list(ids)], np.float32)).to(dt)  # noqa: E731
        g = head.project(torch.from_numpy(feats))  # [n, H]
        cache = head.new_cache(n + k + 1)
        if n > 1:
            head.write_kv(emb(tokens[1:]), g[: n - 1], torch.arange(n - 1), cache)
        token, hidden, out_tokens, out_logits = int(root), g[n - 1: n], [], []
        for step in range(k):
            pos = n - 1 + step
            attend = torch.ones(1, cache.length + 1, dtype=torch.bool)
            out, normed = head(emb([token]), hidden, torch.tensor([pos]), cache, attend)
            draft = head.lm_head(normed).float()[0].numpy()  # [V_draft]
            full = np.full(c.vocab_size, -np.inf, np.float32)
            full[to_target] = draft
            token = int(to_target[int(np.argmax(draft))])
            out_tokens.append(token)
            out_logits.append(full)
            hidden = head.next_hidden(out, normed)
    return out_tokens, np.stack(out_logits)


def compare_steps(head: "Eagle3Head", target: str | os.PathLike[str], draft_gguf: str | os.PathLike[str],
                  contexts: Sequence[Sequence[int]], k: int, embed: np.ndarray) -> list[StepPair]:
    """For every context: the target's features from llama.cpp, then the chain on both sides
    (reference_chain and homespec.heads.llamacpp_draft.LlamaCppEagle3.draft)."""
    pairs = []
    n_ctx = max(256, max(len(c) for c in contexts) + k + 8)
    with LlamaCppEagle3(target, draft_gguf, n_ctx=n_ctx) as theirs:
        for ctx in contexts:
            chain = theirs.draft(ctx, k)
            feats, root = theirs.target_pass(ctx)
            mine, logits = reference_chain(head, embed, feats, ctx, root, k)
            same = ChainPair(len(ctx), mine, chain.tokens, 0.0).agree
            steps = max(1, min(same + 1, k))  # the steps both sides took from the same inputs
            a, b = logits[:steps], chain.logits[:steps]
            finite = np.isfinite(a)
            diff = float(np.abs(a[finite] - b[finite]).max())
            pairs.append(StepPair(len(ctx), mine, chain.tokens, diff, float(np.abs(a[finite]).max())))
    return pairs

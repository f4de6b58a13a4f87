"""Does an exported eagle3 GGUF draft, in llama.cpp, what the head drafts in homespec?

For each context both sides draft a greedy chain of k tokens after the target's next token:
homespec's EAGLE-3 drafter (homespec.nets.eagle3_drafter, a chain: topk 1, full
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
    from homespec.backends.llamacpp.backend import LlamaCppBackend
    from homespec.nets.eagle3_drafter import Eagle3Drafter

    out = []
    n_ctx = max(len(c) for c in contexts) + k + 8
    with LlamaCppBackend.load(os.fspath(target), n_ctx=max(256, n_ctx)) as backend:
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
    from homespec.heads.llamacpp_draft import LlamaCppEagle3

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

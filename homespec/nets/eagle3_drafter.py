"""EAGLE-3 / EAGLE-3.1 drafting in torch: a draft head fed with the target's own features.

The torch reference drafter's network half: the head's KV, its features and its log-probs per
tree level. Which nodes a tree keeps is the drafting policy's, homespec.speculative.tree's:
homespec.speculative.drafters.eagle3_torch.Eagle3Drafter supplies `grow` and is what the torch and
EXL2 backends draft with (homespec.speculative.methods imports it lazily) and the test oracle for
heads run elsewhere. It takes and gives numpy at the Drafter seam (homespec.contracts.drafter:
features in, the dynamic tree's log-probs out) and converts on its own side; nothing on the GGUF
path imports this module unless a head is asked for.

Head entry j pairs the target feature at position j with the token at position j+1 and sits at
RoPE position j (SafeAILab `topK_genrate`, vLLM's EAGLE proposer). Its KV for committed tokens
is always computed from the TARGET's features, never kept from the head's own guesses, so the
head sees what it saw in training (docs/architecture.md, contract 3; docs/speculative.md has what
keeping the guessed entries costs); the speculative tree levels are dropped as soon as the tree
is built.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch

from homespec.contracts.drafter import MAX_DEPTH, DraftShape, Offer, ShapeLimits
from homespec.contracts.tree import DraftTree
from homespec.errors import HomespecError
from homespec.heap import keep_freed_memory

if TYPE_CHECKING:
    from homespec.contracts.backend import Backend, Forward
    from homespec.nets.eagle3 import Eagle3Head


@dataclass(frozen=True, slots=True)
class _Last:
    """The head's step for the newest committed entry: (feature of the token before root, root)."""

    root: int
    hidden: torch.Tensor  # [1, H] what the depth-1 expansions consume
    logp: torch.Tensor  # [1, V_draft] the root's children


# step(tokens [F], parent_rows [F], depth) -> log-probs [F, V_draft] (homespec.speculative.tree.StepFn)
Step = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


class Eagle3DrafterBase(ABC):
    """The head's side of the torch EAGLE drafter; a subclass names the tree the steps grow."""

    name = "eagle3"

    def __init__(
        self,
        head: "Eagle3Head",
        backend: "Backend",
        *,
        depth: int = 6,
        topk: int = 8,
        total: int = 48,
        window: int | None = None,
        capacity: int | None = None,
        sinks: int = 4,
        source: str | None = None,
    ):
        """depth: longest draft path; topk: children per expanded node (1 = chain); total: tree
        nodes including the root; window: attend only to the newest `window` committed entries
        (keeps acceptance flat on long contexts, docs/speculative.md); source: where the head was
        loaded from (reported by `homespec bench --json`)."""
        keep_freed_memory()  # draft steps' temporaries reuse heap memory (homespec.heap)
        c = head.config
        if backend.hidden_size != c.target_hidden_size or backend.n_vocab != c.vocab_size:
            raise HomespecError(
                f"the draft head expects a target with hidden size {c.target_hidden_size} and "
                f"{c.vocab_size} tokens; this target has {backend.hidden_size} and {backend.n_vocab}",
                hint="use a head trained for this target model",
            )
        self.head, self.backend = head, backend
        self.depth, self.topk, self.total, self.window = depth, topk, total, window
        # With a window, the first `sinks` entries stay visible too: attention mass parks on the
        # first tokens of a sequence (StreamingLLM, Xiao et al. 2023), and dropping them skews
        # the softmax over what remains.
        self.sinks = sinks if window is not None else 0
        self.source = source
        self.flush_chunk = 1024  # rows per key/value projection when committed entries are written
        self.feature_layers = c.feature_layers(backend.n_layer)
        backend.set_feature_layers(self.feature_layers)  # must precede the target's prefill
        # room for the committed context plus the speculative levels of the deepest tree the guard
        # may ask for (limits())
        self.cache = head.new_cache(capacity or backend.max_context + max(depth, MAX_DEPTH) * topk + 2)
        # [V_draft] int64 draft id -> target id, for the tree builder (numpy, on the host)
        self._token_map = head.draft_to_target.cpu().numpy() if c.draft_vocab_size != c.vocab_size else None
        self._embed_target = target_embedder(backend)
        # Committed entries not yet in the head's KV: feature blocks (together [P, 3*H_t]), joined
        # once at the next draft (appending a row per plain step must not copy the whole prompt's
        # features again), and the P-1 tokens that follow them (the root completes it).
        self._pending_features: list[np.ndarray] | None = None
        self._pending_tokens: list[int] = []
        self._last: _Last | None = None
        # P(accepted >= d) recorded for this head and shape on held-out prompts (homespec.formats.acceptance),
        # the guard's prior; None when the head carries no record
        self.expected_acceptance: tuple[float, ...] | None = None
        self._warm_up()

    # --- Drafter protocol -------------------------------------------------------------------

    def begin(self, prompt: Sequence[int], forward: "Forward", *, kept: int = 0) -> None:
        """Entries for prompt[kept:] wait for the first draft; entries 0 .. kept-1 are the head's
        KV kept by trim(kept): entry j pairs the target feature at j with the token at j+1, and
        both are the same for a prompt that shares tokens 0 .. kept with the last context."""
        if kept == 0:
            self.reset()
        elif self.cache.length != kept or self._pending_features is not None:
            raise HomespecError(f"the EAGLE-3 drafter holds {self.cache.length} entries, the kept prefix is {kept}",
                                hint="call trim(kept) before begin(prompt, forward, kept=kept)")
        feats = self._features(forward.features, len(prompt) - kept)
        self._pending_features = [feats]
        self._pending_tokens = [int(t) for t in prompt[kept + 1:]]
        self._last = None

    def trim(self, keep: int) -> int:
        """Keep entries 0 .. keep-1. Entries still pending (steps decoded plainly since the last
        draft) are written first where their next token is known; the entry of the newest
        committed token waits for a root it never got, so at most (committed - 1) survive."""
        if self._pending_features is not None and keep > self.cache.length:
            self._write_pending(keep - self.cache.length)
        keep = min(keep, self.cache.length)
        self.cache.truncate(keep)
        self._pending_features, self._pending_tokens, self._last = None, [], None
        return keep

    def propose(self, root: int, context: Sequence[int]) -> DraftTree:
        if self._pending_features is not None:
            self._flush(root)
        if self._last is None or self._last.root != root or self.cache.length != len(context):
            raise HomespecError(
                f"the EAGLE-3 drafter is out of step: it holds {self.cache.length} committed positions, "
                f"the context has {len(context)}",
                hint="every committed token must reach the drafter through begin() or accept()",
            )
        committed = self.cache.length
        head = self.head
        state = {"hidden": self._last.hidden, "anc": [[]]}  # per row of the previous level

        @torch.no_grad()
        def step(tokens: np.ndarray, parent_rows: np.ndarray, depth: int) -> np.ndarray:
            if depth == 0:
                return self._last.logp.float().cpu().numpy()  # computed when the root's entry was committed
            n = tokens.shape[0]
            start = self.cache.length
            rows = parent_rows.tolist()
            anc = [state["anc"][p] + [start + r] for r, p in enumerate(rows)]
            attend = torch.zeros(n, start + n, dtype=torch.bool)  # [N, S]
            attend[:, self._window_start(committed) : committed] = True
            attend[:, : min(self.sinks, committed)] = True
            for r, slots in enumerate(anc):
                attend[r, slots] = True
            positions = torch.full((n,), committed - 1 + depth, dtype=torch.int64)
            dev = self.cache.k.device
            out, normed = head(
                self._embed(torch.from_numpy(tokens).to(dev)),
                state["hidden"][torch.from_numpy(parent_rows).to(dev)],
                positions.to(dev),
                self.cache,
                attend.to(dev),
            )
            state["hidden"], state["anc"] = head.next_hidden(out, normed), anc
            return head.log_probs(normed).float().cpu().numpy()  # [N, V_draft]

        tree = self.grow(step, root, token_map=self._token_map)
        self.cache.truncate(committed)  # the tree levels were speculative
        return tree

    @abstractmethod
    def grow(self, step: Step, root: int, *, token_map: np.ndarray | None) -> DraftTree:
        """The draft tree under `root` whose levels `step` scores (token_map: [V_draft] draft id ->
        target id, or None)."""

    def offers(self, root: int, context: Sequence[int]) -> tuple[Offer, ...]:
        """An EAGLE head drafts when chosen: what it offers is known only then."""
        return (Offer(self.name),)

    def accept(self, tokens: Sequence[int], features: np.ndarray | None, next_token: int) -> None:
        tokens = [int(t) for t in tokens]
        feats = self._features(features, len(tokens))
        if self._pending_features is not None:
            # Plain-decoding steps since the last draft: the root completes the last pending entry.
            self._pending_features.append(feats)
            self._pending_tokens.extend(tokens)
            return
        if self._last is None or tokens[0] != self._last.root:
            raise HomespecError("the EAGLE-3 drafter was handed a path that does not start at its root", hint="call begin() before accept()")
        else:
            tokens = tokens[1:]
        # The committed entries are recomputed from the target's verification features — lazily:
        # they are written when the next draft is proposed (_flush), so steps the guard runs as
        # plain decoding cost the head nothing.
        self._pending_features, self._pending_tokens = [feats], tokens
        self._last = None

    def reset(self) -> None:
        self.cache.truncate(0)
        self._pending_features, self._pending_tokens, self._last = None, [], None

    def snapshot(self, keep: int) -> tuple[int, object]:
        """The head's state for the first `keep` committed tokens, as a copy (--cache-ram keeps it
        in host RAM) -> (entries kept, the copy). Trims the drafter to them, as trim() does."""
        kept = self.trim(keep)
        return kept, (self.cache.k[:kept].clone(), self.cache.v[:kept].clone())

    def restore(self, saved: object) -> int:
        """Put back a snapshot() -> the committed tokens it covers."""
        k, v = saved  # type: ignore[misc]
        n = int(k.shape[0])
        self.reset()
        self.cache.k[:n] = k
        self.cache.v[:n] = v
        self.cache.length = n
        return n

    # --- the shape the guard may set (contracts/drafter.py) ----------------------------------

    @property
    def shape(self) -> DraftShape:
        return DraftShape(self.depth, self.topk, self.total)

    def limits(self) -> ShapeLimits:
        """A proposal writes up to `topk` head-cache rows per level below the first after the
        committed context (at most max_context - 1 entries): the cache bounds the depth."""
        room = self.cache.capacity - (self.backend.max_context - 1)
        return ShapeLimits(max_depth=max(self.depth, room // self.topk + 1))

    def set_shape(self, depth: int, total: int) -> DraftShape:
        self.limits().check(depth, total)
        self.depth, self.total = depth, total
        return self.shape

    # --- internals -------------------------------------------------------------------------

    @torch.no_grad()
    def _warm_up(self) -> None:
        """Pay first-call costs at load, not inside the first draft: the backend's embedding table
        (dequantised from the GGUF on first use) and torch's first kernels of each shape family,
        which would otherwise land on the first speculative step of a session (docs/speculative.md)."""
        c = self.head.config
        dev = self.cache.k.device
        scratch = self.head.new_cache(4)
        emb = self._embed(torch.zeros(2, dtype=torch.int64, device=dev))
        hidden = self.head.project(torch.zeros(2, 3 * c.target_hidden_size, device=dev))
        _, normed = self.head(emb, hidden, torch.arange(2, device=dev), scratch, torch.ones(2, 2, dtype=torch.bool, device=dev))
        self.head.log_probs(normed)

    def _features(self, features: np.ndarray | None, n: int) -> np.ndarray:
        width = 3 * self.head.config.target_hidden_size
        if features is None or tuple(features.shape) != (n, width):
            got = None if features is None else tuple(features.shape)
            raise HomespecError(
                f"the EAGLE-3 drafter needs target features [{n}, {width}], got {got}",
                hint="the backend must capture the layers set by set_feature_layers()",
            )
        return features

    def _window_start(self, committed: int) -> int:
        return 0 if self.window is None else max(0, committed - self.window)

    def _embed(self, tokens: torch.Tensor) -> torch.Tensor:
        if self.head.embed_tokens is not None:
            return self.head.embed_tokens(tokens)
        return self._embed_target(tokens)

    def _joined_features(self) -> torch.Tensor:
        """The pending feature blocks as one [P, 3*H_t] float32 tensor on the host."""
        blocks = self._pending_features
        return torch.from_numpy(blocks[0] if len(blocks) == 1 else np.concatenate(blocks))

    @torch.no_grad()
    def _write_pending(self, n: int) -> None:
        """Write the first n pending entries' keys and values (at most those whose next token is
        known), without attention: what trim() keeps of steps the head never drafted from."""
        feats = self._joined_features()
        n = min(n, len(self._pending_tokens), feats.shape[0])
        tokens = torch.tensor(self._pending_tokens[:n], dtype=torch.int64)
        start, dev = self.cache.length, self.cache.k.device
        for lo in range(0, n, self.flush_chunk):
            hi = min(n, lo + self.flush_chunk)
            self.head.write_kv(self._embed(tokens[lo:hi].to(dev)), self.head.project(feats[lo:hi].to(dev)),
                               torch.arange(start + lo, start + hi, device=dev), self.cache)

    @torch.no_grad()
    def _flush(self, root: int) -> None:
        """Write the pending (target feature, next token) entries; the root is the last token.

        Only the last entry's output is read (it starts the draft), and a one-layer head's key and
        value of an entry depend on that entry's inputs alone, so every earlier entry is written
        with its key/value projections only, in chunks of `flush_chunk` rows, and just the last
        runs attention and the MLP: an 8K-token prompt costs 8K projections, not 8K x 8K attention."""
        feats = self._joined_features()
        tokens = torch.tensor(self._pending_tokens + [root], dtype=torch.int64)  # [N]
        n, start = tokens.shape[0], self.cache.length
        dev = self.cache.k.device
        for lo in range(0, n - 1, self.flush_chunk):
            hi = min(n - 1, lo + self.flush_chunk)
            self.head.write_kv(self._embed(tokens[lo:hi].to(dev)), self.head.project(feats[lo:hi].to(dev)),
                               torch.arange(start + lo, start + hi, device=dev), self.cache)
        last = start + n - 1
        slot = torch.arange(last + 1)
        attend = torch.ones(1, last + 1, dtype=torch.bool)  # causal: the last entry sees everything
        if self.window is not None:
            attend &= (slot[None, :] > last - self.window) | (slot[None, :] < self.sinks)
        out, normed = self.head(
            self._embed(tokens[-1:].to(dev)),
            self.head.project(feats[-1:].to(dev)),
            torch.tensor([last], device=dev),
            self.cache,
            attend.to(dev),
        )
        self._last = _Last(root=root, hidden=self.head.next_hidden(out, normed), logp=self.head.log_probs(normed))
        self._pending_features, self._pending_tokens = None, []


def target_embedder(target: "Backend") -> Callable[[torch.Tensor], torch.Tensor]:
    """The target's token embeddings as the head consumes them: ids [...] -> [..., H] float32.

    The torch and EXL2 backends embed on their own device (`embed`, torch tensors); a llama.cpp
    target hands out its host table as numpy (`token_embeddings`, [V, H] float16, dequantised
    once and shared by every lane's drafter), which torch reads in place without a copy."""
    table = getattr(target, "token_embeddings", None)
    if table is None:
        return target.embed
    host = torch.from_numpy(table())  # [V, H] float16, the backend's own array

    def embed(tokens: torch.Tensor) -> torch.Tensor:
        return host[tokens.cpu().long()].float().to(tokens.device)

    return embed

"""The GGUF backend: llama.cpp through llama-cpp-python's low-level C API.

One llama_context with a unified KV cache holds the committed tokens in sequence 0. A draft tree
is verified in one llama_decode call: each root-to-leaf path is a sequence, tree nodes carry the
ids of every path through them (backends/llamacpp/tree.py), and commit() turns the accepted path
back into the continuation of sequence 0 with a few llama_memory_seq_* calls. Features for the
draft head come out of the same llama_decode call (backends/llamacpp/features.py).

What it shares with MultiSeqBackend (loading, shape, decoding rows, teardown) is core.py's LlamaCppCore.
Imported lazily (homespec plan never imports it); llama_cpp itself is imported when it opens.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from homespec.backends.llamacpp import rollback, state
from homespec.backends.llamacpp.core import LlamaCppCore
from homespec.contracts.backend import Forward, check_rollback, nothing_verified
from homespec.backends.llamacpp.tree import (
    DEFAULT_MAX_LEAVES,
    MAX_SEQ,
    TreeLayout,
    contiguous_prefix,
    leaf_capacity,
    path_seq,
    tree_layout,
)
from homespec.backends.settings import BackendSettings
from homespec.contracts.tree import check_path, check_tree
from homespec.errors import HomespecError, UsageError

_VERIFY_MODES = ("batch", "exact")


class LlamaCppBackend(LlamaCppCore):
    supports_tree = True

    # --- construction ---------------------------------------------------------------------------

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        settings: BackendSettings,
        *,
        seed: int = 0,
        max_leaves: int = DEFAULT_MAX_LEAVES,
        verify_mode: str = "batch",
        feature_capture: str = "auto",
    ) -> None:
        """Open a GGUF file with `settings` (a plan's: homespec.backends.settings.settings_from_plan).
        `max_leaves`: the most leaves a verified tree has (a planned tree of N nodes has at most
        N - 1: llamacpp.tree.tree_leaves); `verify_mode="exact"` evaluates tree nodes one token per
        decode (the same kernels as plain decoding); `feature_capture` is "auto", "layer_inp" or
        "eval_callback"."""
        if verify_mode not in _VERIFY_MODES:
            raise UsageError(f"unknown verify mode {verify_mode!r}", hint="use 'batch' or 'exact'")
        if not 1 <= max_leaves <= MAX_SEQ:
            raise UsageError(f"max_leaves {max_leaves} is outside 1..{MAX_SEQ} (llama.cpp's sequence limit)")
        if feature_capture not in ("auto", "layer_inp", "eval_callback"):
            raise UsageError(f"unknown feature capture {feature_capture!r}", hint="auto, layer_inp or eval_callback")
        max_leaves = leaf_capacity(settings, max_leaves)
        self.seed = seed  # decoding here is deterministic; kept for the run record
        self.verify_mode = verify_mode
        self._n_past = 0
        # the sequence ids every committed cell carries: 0 .. _tagged-1 (a tree's leaves attend through
        # them; kept between steps, so a tree step adds ids to its own few cells, not to the context's)
        self._tagged = 1
        self._pending: tuple[TreeLayout, list[int], list[int]] | None = None  # last verified tree: layout, tokens, parents
        self.order_repairs = 0  # commits that re-decoded a path tail to keep cells in position order
        self._open(model_path, settings, n_seq=max_leaves, seq_per_row=max_leaves, feature_capture=feature_capture)
        # llama.cpp pads the KV cache to a multiple of 256 cells; the context is what was asked
        # for (and planned), so a prompt that does not fit --ctx is refused with that figure
        self.max_context = min(settings.n_ctx, self._ll.llama_n_ctx(self._ctx))
        # Flash attention sums over cells in cell order, so the committed cells must stay in
        # position order for results to match plain decoding (llamacpp/tree.py's docstring).
        self._keep_cell_order = self.flash_attn_active or verify_mode == "exact"
        self._n_seq_max = max_leaves
        self.rollback_mode = rollback.rollback_mode(self, exact=verify_mode == "exact")

    # --- shape --------------------------------------------------------------------------------

    @property
    def n_past(self) -> int:
        return self._n_past

    # --- forward passes -------------------------------------------------------------------------

    def prefill(self, tokens: Sequence[int]) -> Forward:
        """Append `tokens` to the cache. -> logits [1, V] for the last one, features [n, k*H]."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise HomespecError("prefill needs at least one token", hint="the prompt is empty")
        self._discard_pending()
        self._check_room(len(tokens), "the prompt")
        n = len(tokens)
        ids = self._committed_ids
        rows = [(tokens[i], self._n_past + i, ids, i == n - 1) for i in range(n)]
        logits, feats, _ = self._decode_rows(rows)
        self._n_past += n
        return Forward(logits=logits, features=feats)

    def score(self, tokens: Sequence[int]) -> np.ndarray:
        """Teacher forcing: evaluate `tokens` from an empty cache in one pass (llama_decode calls of
        n_batch rows) with the logits of every position kept. -> logits [n, V] float32; row i
        scores the token after tokens[i]. The tokens stay in the cache (n_past = n)."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise HomespecError("score needs at least one token", hint="pass prompt + output token ids")
        self.reset()
        self._check_room(len(tokens), "the re-score")
        logits, _, _ = self._decode_rows([(t, i, (0,), True) for i, t in enumerate(tokens)])
        self._n_past = len(tokens)
        return logits

    def verify(self, tokens: Sequence[int], parents: Sequence[int], *, view: bool = False) -> Forward:
        """Evaluate a draft tree without committing it. -> logits [T, V], features [T, k*H].
        `view`: the logits stay in llama.cpp's buffer, valid until the next decode (the engine's
        step reads them first; engine/lanes.py), in the batch's row order: Forward.rows maps a
        tree's nodes to them (a plain step's root and a chain are in node order already)."""
        tokens = [int(t) for t in tokens]
        parents = check_tree(tokens, parents)
        layout = tree_layout(parents, checked=True)
        rollback.check_chain(self, layout.n_seq)
        if layout.n_seq > self._n_seq_max:
            raise UsageError(
                f"the draft tree has {layout.n_seq} leaves; this backend was loaded for at most {self._n_seq_max}",
                hint="draft a narrower tree (fewer --draft-tokens) or use a larger context: a context verifies "
                "at most min(max_leaves, n_ctx, n_batch) leaves",
            )
        self._discard_pending()
        self._check_room(len(tokens), "the draft tree")
        rollback.before_verify(self, 0, len(tokens))
        self._tag(layout.n_seq)  # every path sees the committed context: its cells carry each leaf's id
        self._pending = (layout, tokens, parents)
        # batch rows in depth-first order; results are put back in node order below; a chain's rows
        # (one path) carry every id the committed cells do, so whatever it keeps needs no copying
        seq_ids = layout.seq_ids if layout.n_seq > 1 else [self._committed_ids] * len(tokens)
        rows = [(tokens[i], self._n_past + layout.depths[i], seq_ids[i], True) for i in layout.order]
        back = layout.slot  # node i's row in the batch: logits and features come out in node order
        if self.verify_mode == "exact":
            # One node per decode: the one-token kernels plain decoding uses, so the verdict
            # matches plain greedy decoding token for token (docs/backends.md: noise floor).
            parts = [self._decode_rows([row]) for row in rows]
            logits = np.concatenate([p[0] for p in parts], axis=0)[list(back)]
            feats = None if parts[0][1] is None else np.concatenate([p[1] for p in parts], axis=0)[list(back)]
        elif view:  # the logits stay in batch order, in llama.cpp's buffer: node i's is row back[i]
            logits, feats, _ = self._decode_rows(rows, row_order=back, view=True, lazy_features=layout.n_seq > 1)
            return Forward(logits=logits, features=feats, rows=None if layout.n_seq == 1 else tuple(back))
        else:
            logits, feats, _ = self._decode_rows(rows, logit_order=back, row_order=back)
        return Forward(logits=logits, features=feats)

    def commit(self, path: Sequence[int]) -> None:
        """Keep the nodes on `path` (root first) as the continuation of sequence 0, drop the rest."""
        if self._pending is None:
            raise nothing_verified()
        layout, tokens, parents = self._pending
        path = check_path(path, parents, checked=True)
        if self.recurrent:  # a chain: its first len(path) tokens stay, the state gives the rest back
            rollback.keep(self, 0, self._n_past, [tokens[i] for i in path], len(tokens))
            self._pending = None
            self._n_past += len(path)
            return
        # Nodes past a hole in the batch are re-decoded behind the others when cell order matters.
        k = contiguous_prefix(path, layout) if self._keep_cell_order else len(path)
        if k < len(path) and self._keep_in_order(path_seq(path, layout), self._committed_ids, self._n_past,
                                                 len(path), range(layout.n_seq)):
            k = len(path)  # the nodes past the hole moved into it: nothing to decode again
        elif layout.n_seq > 1:
            self._keep_path(path_seq(path[:k], layout), self._committed_ids, self._n_past, k,
                            tree=range(layout.n_seq), below=layout.seq_ids[path[k - 1]], alone=True)
        elif k < len(tokens):  # a chain: its rows carry every id; cut them all after the kept nodes
            self._ll.llama_memory_seq_rm(self._mem, -1, self._n_past + k, -1)
        if self.n_swa > 0 and not self.swa_full:
            # llama.cpp reuses a cell that slid out of the window only while one id holds it: a
            # sliding-window cache sized to the window fills up unless the ids go after each tree
            self._untag()
        self._pending = None
        self._n_past += k
        if k < len(path):
            rest = [tokens[i] for i in path[k:]]
            rows = [(t, self._n_past + j, self._committed_ids, False) for j, t in enumerate(rest)]
            if self.verify_mode == "exact":
                for row in rows:
                    self._decode_rows([row])
            else:
                self._decode_rows(rows)
            self._n_past += len(rest)
            self.order_repairs += 1

    @property
    def _committed_ids(self) -> tuple[int, ...]:
        return tuple(range(self._tagged))

    def _tag(self, n: int) -> None:
        """Let the committed cells carry ids 0 .. n-1 (each one added once: kept while trees come)."""
        for s in range(self._tagged, n):
            self._ll.llama_memory_seq_cp(self._mem, 0, s, -1, -1)
        self._tagged = max(self._tagged, n)

    def _untag(self) -> None:
        """Committed cells back to id 0 alone, before a cut or a state read or written by id 0."""
        if self._tagged > 1:
            self._ll.llama_memory_seq_keep(self._mem, 0)
            self._tagged = 1

    def rollback(self, n: int) -> None:
        n = check_rollback(n, self._n_past)
        self._discard_pending()
        self._untag()
        if not self._ll.llama_memory_seq_rm(self._mem, 0, self._n_past - n, -1):
            raise HomespecError(f"llama.cpp cannot take {n} tokens back out of this model's recurrent state",
                                hint="reset() and prefill again")
        self._n_past -= n

    def trim(self, keep: int) -> bool:
        """Keep the first `keep` committed tokens, drop the rest (a later prompt shares that
        prefix). False where llama.cpp cannot cut there (a recurrent state, an SWA window moved
        past `keep`): the caller then resumes from a checkpoint, or resets."""
        self._discard_pending()
        keep = max(0, min(keep, self._n_past))
        if keep == self._n_past:
            return True  # nothing cut: the committed cells keep their ids for the next prompt's rows
        self._untag()
        if not state.cut(self, 0, keep):
            return False
        self._n_past = keep
        return True

    # --- the sequence's state in bytes (prompt reuse; backends/llamacpp/state.py) ---------------

    def checkpoint(self) -> tuple[int, bytes] | None:
        """(position, partial state) to resume from later, where the memory cannot be cut anywhere."""
        if state.cut_anywhere(self):
            return None
        self._discard_pending()
        self._untag()
        return self._n_past, state.read(self, 0, partial=True)

    def resume(self, pos: int, data: bytes) -> bool:
        """Back to `pos` from checkpoint(): False (the cache empty) if llama.cpp refuses."""
        self._discard_pending()
        self._untag()
        ok = pos <= self._n_past and state.resume(self, 0, pos, data)
        self._n_past = pos if ok else 0
        return ok

    def save_state(self) -> bytes:
        """The whole sequence's state (--cache-ram)."""
        self._discard_pending()
        self._untag()
        return state.read(self, 0)

    def load_state(self, data: bytes, n_past: int) -> bool:
        """Replace the cache with a state save_state() returned for `n_past` tokens."""
        self.reset()
        if not state.write(self, 0, data):
            self.reset()
            return False
        self._n_past = n_past
        return True

    def reset(self) -> None:
        self._ll.llama_memory_clear(self._mem, True)
        self._snapshots.drop(0)
        self._pending = None
        self._n_past = 0
        self._tagged = 1

    def _discard_pending(self) -> None:
        if self._pending is not None and self.recurrent:
            self._pending = None
            if not rollback.discard(self, 0, self._n_past):
                self._n_past = 0
                raise _emptied()
        elif self._pending is not None:  # the tree's cells, under whichever ids, go
            self._ll.llama_memory_seq_rm(self._mem, -1, self._n_past, -1)
            self._pending = None

    def _check_room(self, n_new: int, what: str) -> None:
        # Checked here because llama_decode would only say "no KV slot" (return 1).
        if self._n_past + n_new > self.max_context:
            raise HomespecError(
                f"context full: {self._n_past} tokens in the cache + {n_new} for {what} > n_ctx {self.max_context}",
                hint="start with a larger --ctx (see `homespec plan`) or a shorter prompt",
            )

    # --- teardown ----------------------------------------------------------------------------

    def __enter__(self) -> "LlamaCppBackend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _emptied() -> HomespecError:
    return HomespecError("a draft chain was verified and never committed, and this model's recurrent state cannot "
                         "give all of it back: the sequence was emptied", hint="commit() after each verify()")

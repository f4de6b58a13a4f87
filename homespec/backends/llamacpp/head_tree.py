"""A draft tree's levels grown in one llama.cpp call: homespec's patch's `llama_homespec_grow_tree`
(kernels/llamacpp/README.md, src/llama-homespec-tree.cpp) on the head's context.

`grow_tree` (homespec/speculative/tree.py) over `LlamaCppHead.level` makes, per level, a Python
round of batch filling, two ctypes calls per node for its ancestors' cells, a llama_decode and a
numpy sort of each row's children: for the planner's 48-node tree 0.2-0.6 ms a step more host time
than one call here (docs/backends.md, "The tree's levels in one call"). The patch runs the same loop in C++ next to llama_decode; Python hands it the seed's
children and reads back every candidate (token, log-probability, score, parent); the drafter
keeps the tree as grow_tree does (speculative/tree.py keep_best). The rule is grow_tree's, tie for tie
(tests/backends/test_llamacpp_head_tree.py compares the two trees on a real head); grow_tree stays the
reference, and the path for builds without the patch, for the host's top-k and for MTP layers.

`llama_homespec_draft_tree` (NativeTree.draft) takes the rest of the step into the same call: the encoder
over the entries the step accepted, their decode with the seed (the seed's row the only output), the
levels, and keep_best's choice of the nodes that stay; the drafter gets the tree back.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

import numpy as np

from homespec.backends.llamacpp import exports
from homespec.backends.llamacpp.lib import Held, LogCollector, reason
from homespec.contracts.head import Candidates, Grown
from homespec.contracts.tree import DraftTree
from homespec.errors import HomespecError

_P, _I32 = ctypes.c_void_p, ctypes.c_int32
# (ctx, depth, topk, k_dev, seed_ids, seed_logp, seed_row, pos1, set0, set1, vocab, n_vocab,
#  tokens, logp, score, parent, capacity, t_decode, rc)
_ARGTYPES = [_P, _I32, _I32, _I32, _P, _P, _P, _I32, _P, _P, _P, _I32, _P, _P, _P, _P, _I32, _P, _P]
# llama_homespec_draft_tree: (ctx, n_in, in_tokens, in_feats, feat_width, pos0, ids, n_ids, depth, topk, k_dev, total,
#  set0, set1, vocab, n_vocab, tokens, logp, score, parent, capacity, seed_row, tree_tokens, tree_parents,
#  tree_probs, t_decode, rc)
_DRAFT_ARGTYPES = [_P, _I32, _P, _P, _I32, _I32, _P, _I32, _I32, _I32, _I32, _I32, _P, _P, _P, _I32,
                   _P, _P, _P, _P, _I32, _P, _P, _P, _P, _P, _P]
_ERRORS = {-1: "it was handed arguments it does not take", -3: "a row held no draft-vocabulary index"}
_KEPT_ENTRIES = 64  # the most entries a draft call reads from NativeTree's own buffers


def grow_entry_point() -> Any | None:
    """llama_homespec_grow_tree, typed; None where the build lacks it (no patch, or an older one)."""
    return exports.typed_entry_point(exports.GROW_SYMBOL, exports.GROW_TREES, _ARGTYPES, _I32)


def draft_entry_point() -> Any | None:
    """llama_homespec_draft_tree, typed; None where the build lacks it."""
    return exports.typed_entry_point(exports.DRAFT_SYMBOL, exports.DRAFT_STEP, _DRAFT_ARGTYPES, _I32)


class NativeTree:
    """One lane set's tree ids and the output buffers of llama_homespec_grow_tree, for one head."""

    def __init__(self, fn: Any, ctx: Any, k_dev: int, sets: list[tuple[tuple[int, ...], tuple[int, ...]]],
                 vocab: np.ndarray | None, n_vocab: int, log: LogCollector, *, draft_fn: Any = None,
                 committed: list[tuple[int, ...]] | None = None, n_embd: int = 0) -> None:
        """sets: each lane's two tree-id sets (k_dev ids each); vocab: the device's index -> target id
        (None: the same, a head over the whole vocabulary); draft_fn: llama_homespec_draft_tree where the
        build has it, with each lane's committed ids and the head's row width."""
        self._fn, self._ctx, self.k_dev, self._log = fn, ctx, k_dev, log
        self._draft = draft_fn
        # every array a call reads or writes lives here, its address taken once: numpy's `.ctypes` is Python
        # code, and the first use of a code path after a decode costs tens of microseconds on a CPU
        # (docs/backends.md, "Host work per step")
        self._committed = [Held(np.asarray(c, dtype=np.int32)) for c in committed or []]
        self._seed_row = np.empty(n_embd, np.float32)
        self._sets = [tuple(Held(np.asarray(s, dtype=np.int32)) for s in pair) for pair in sets]
        self._vocab = None if vocab is None else np.ascontiguousarray(vocab, dtype=np.int64)
        self._n_vocab = n_vocab
        self._t, self._rc = ctypes.c_double(), ctypes.c_int32()
        self._p_vocab = None if self._vocab is None else self._vocab.ctypes.data
        self._p_seed_row, self._p_t, self._p_rc = self._seed_row.ctypes.data, ctypes.byref(self._t), ctypes.byref(self._rc)
        self._in_toks, self._in_feats = np.empty(0, np.int32), np.empty((0, 0), np.float32)  # the entries' (draft)
        self._p_in = (self._in_toks.ctypes.data, self._in_feats.ctypes.data)
        self._cap = self._tree_cap = 0
        self.decode_s = 0.0  # seconds in llama_decode inside the calls, all told (what a benchmark leaves out)
        self.calls = self.decodes = 0  # the calls made, and the llama_encode / llama_decode calls inside them
        self.drafted = 0  # the calls that drafted a whole step (draft)

    @property
    def drafts(self) -> bool:
        """Can it draft a whole step in one call (draft)?"""
        return self._draft is not None

    def _buffers(self, cap: int, total: int = 0) -> None:
        """Grow the output buffers to `cap` candidates and a `total`-node tree, each with its address."""
        if cap > self._cap:
            self._cap = cap
            self._tokens, self._parent = np.empty(cap, np.int64), np.empty(cap, np.int64)
            self._logp, self._score = np.empty(cap, np.float64), np.empty(cap, np.float64)
            self._p_out = tuple(a.ctypes.data for a in (self._tokens, self._logp, self._score, self._parent))
        if total > self._tree_cap:
            self._tree_cap = total
            self._tree = (np.empty(total, np.int64), np.empty(total, np.int64), np.empty(total, np.float32))
            self._p_tree = tuple(a.ctypes.data for a in self._tree)

    def _entries(self, tokens: Sequence[int], features: np.ndarray) -> tuple[int, int, Any]:
        """The entries' tokens and features where the call reads them: (addresses, what keeps them alive).
        A step's few go into buffers kept with their addresses; a long catch-up's into arrays of its own
        (kept buffers that large would stay: 48 KiB a row for an 8B target)."""
        m, width = len(tokens), features.shape[1]
        if m > _KEPT_ENTRIES:
            toks = np.ascontiguousarray(tokens, dtype=np.int32)
            feats = np.ascontiguousarray(features, dtype=np.float32)
            return toks.ctypes.data, feats.ctypes.data, (toks, feats)
        if m > len(self._in_toks) or width != self._in_feats.shape[1]:
            cap = max(m, len(self._in_toks))
            self._in_toks, self._in_feats = np.empty(cap, np.int32), np.empty((cap, width), np.float32)
            self._p_in = (self._in_toks.ctypes.data, self._in_feats.ctypes.data)
        self._in_toks[:m] = tokens
        self._in_feats[:m] = features
        return *self._p_in, None

    def grow(self, lane: int, seed: Candidates, pos1: int, *, depth: int, topk: int) -> tuple[Grown, float]:
        """Every candidate of the tree whose level 1 sits at cell pos1, from the seed's children (views
        of this object's buffers, valid until its next call). -> (them, the seconds spent in llama_decode)."""
        self._buffers(topk + (depth - 1) * topk * topk)
        ids = np.ascontiguousarray(seed.ids[0, :topk], dtype=np.int64)
        logp = np.ascontiguousarray(seed.logp[0, :topk], dtype=np.float64)
        row = np.ascontiguousarray(seed.hidden[0], dtype=np.float32)
        set0, set1 = self._sets[lane]
        n = self._fn(self._ctx, depth, topk, self.k_dev, ids.ctypes.data, logp.ctypes.data, row.ctypes.data, pos1,
                     set0.addr, set1.addr, self._p_vocab, self._n_vocab, *self._p_out, self._cap, self._p_t, self._p_rc)
        self._check(n, "llama_homespec_grow_tree")
        self.decodes += depth - 1
        return Grown(self._tokens[:n], self._logp[:n], self._score[:n], self._parent[:n]), self._t.value

    def draft(self, lane: int, tokens: Sequence[int], features: np.ndarray, pos0: int, *, depth: int, topk: int,
              total: int) -> tuple[DraftTree, Candidates, float]:
        """A step's draft in one call: the committed entries (tokens[i], target features[i]) at cells
        pos0 + i, the last the seed (its token the root), the tree grown from the seed's children and its
        best total - 1 candidates kept (keep_best's rule). -> (the tree, the seed's output, the seconds
        spent in llama_encode and llama_decode)."""
        self._buffers(topk + (depth - 1) * topk * topk, total)
        p_toks, p_feats, _alive = self._entries(tokens, features)
        (set0, set1), ids = self._sets[lane], self._committed[lane]
        t_tokens, t_parents, t_probs = self._tree
        n = self._draft(self._ctx, len(tokens), p_toks, p_feats, features.shape[1], pos0, ids.addr, len(ids.a), depth,
                        topk, self.k_dev, total, set0.addr, set1.addr, self._p_vocab, self._n_vocab, *self._p_out,
                        self._cap, self._p_seed_row, *self._p_tree, self._p_t, self._p_rc)
        self._check(n, "llama_homespec_draft_tree")
        self.decodes += depth + 1  # the encoder's call, the entries' and the levels'
        self.drafted += 1
        tree = DraftTree(tokens=t_tokens[:n].copy(), parents=t_parents[:n].copy(), probs=t_probs[:n].copy())
        seed = Candidates(self._tokens[None, :topk].copy(), self._logp[None, :topk].copy(), self._seed_row[None].copy())
        return tree, seed, self._t.value

    def _check(self, n: int, name: str) -> None:
        """Count a call's decode time; raise where it failed."""
        self.decode_s += self._t.value
        if n < 0:
            if n == -2:
                raise HomespecError(f"the draft head's llama.cpp call failed (code {self._rc.value}): "
                                    f"{reason(self._log, 'no detail')}",
                                    hint="code 1 means its KV cache is full: a larger --ctx helps")
            raise HomespecError(f"{name} failed: {_ERRORS.get(n, f'code {n}')}",
                                hint="rebuild llama.cpp with homespec's patch (scripts/setup.sh)")
        self.calls += 1

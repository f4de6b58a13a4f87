"""Paired A/B in one run (paired.py): even steps take the arrays' addresses kept (this checkout), odd steps
numpy's .ctypes each call (as before), for the one-call draft and the kept path.
python paired_addresses.py STEPS ROUNDS"""
import ctypes

import numpy as np

from paired import run
from homespec.backends.llamacpp import head_tree as ht, core as cc
from homespec.contracts.head import Candidates
from homespec.contracts.tree import DraftTree
state = {"new": True}
new_draft, new_keep = ht.NativeTree.draft, cc.LlamaCppCore._native_keep
def old_draft(self, lane, tokens, features, pos0, *, depth, topk, total):
    self._buffers(topk + (depth - 1) * topk * topk, total)
    toks = np.ascontiguousarray(tokens, dtype=np.int32)
    feats = np.ascontiguousarray(features, dtype=np.float32)
    (set0, set1), ids = self._sets[lane], self._committed[lane]
    set0, set1, ids = set0.a, set1.a, ids.a
    t_tokens, t_parents, t_probs = self._tree
    n = self._draft(self._ctx, len(toks), toks.ctypes.data, feats.ctypes.data, feats.shape[1], pos0,
                    ids.ctypes.data, len(ids), depth, topk, self.k_dev, total, set0.ctypes.data, set1.ctypes.data,
                    None if self._vocab is None else self._vocab.ctypes.data, self._n_vocab,
                    self._tokens.ctypes.data, self._logp.ctypes.data, self._score.ctypes.data,
                    self._parent.ctypes.data, self._cap, self._seed_row.ctypes.data, t_tokens.ctypes.data,
                    t_parents.ctypes.data, t_probs.ctypes.data, ctypes.byref(self._t), ctypes.byref(self._rc))
    self._check(n, "llama_homespec_draft_tree")
    self.decodes += depth + 1
    self.drafted += 1
    tree = DraftTree(tokens=t_tokens[:n].copy(), parents=t_parents[:n].copy(), probs=t_probs[:n].copy())
    seed = Candidates(self._tokens[None, :topk].copy(), self._logp[None, :topk].copy(), self._seed_row[None].copy())
    return tree, seed, self._t.value
def old_keep(self, seq, ids, p0, k, tree, *, in_order):
    if self._keep_native is None:
        return False
    t, c = np.asarray(tree, dtype=np.int32), np.asarray(ids, dtype=np.int32)
    return not self._keep_native(self._ctx, seq, p0, p0 + k, t.ctypes.data, len(t), c.ctypes.data, len(c), int(in_order))
def pick(first):
    state["new"] = first  # the step's way, for its draft and its keep


def draft(self, *a, **k):
    return (new_draft if state["new"] else old_draft)(self, *a, **k)
def keep(self, *a, **k):
    return (new_keep if state["new"] else old_keep)(self, *a, **k)
ht.NativeTree.draft, cc.LlamaCppCore._native_keep = draft, keep
run(pick, ("kept addresses", ".ctypes"), ("draft",))

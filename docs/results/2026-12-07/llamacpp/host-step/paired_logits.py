"""Paired A/B in one run (paired.py): even steps read the pass's logits through a getter typed to return their
address (lib.address_getter), odd ones through llama-cpp-python's pointer and ctypes.cast (as before); `same`
as the last argument: both halves the new way (the control). python paired_logits.py STEPS ROUNDS [same]"""
import sys

import numpy as np

from homespec.backends.llamacpp import core as cc
from paired import run

same = sys.argv[3:] == ["same"]
state = {"new": True}
new_logits = cc.LlamaCppCore._logits


def old_logits(self, n_out, order, view=False):
    if not n_out:
        return np.empty((0, self.n_vocab), np.float32)
    buf = self._logit_rows.rows(self._ll.llama_get_logits(self._ctx), n_out)
    if view and (order is None or cc._in_order(order, n_out)):
        return buf
    return buf.copy() if order is None else buf[np.asarray(order, dtype=np.intp)]


def logits(self, *a, **k):
    return (new_logits if state["new"] else old_logits)(self, *a, **k)


def pick(first):
    state["new"] = first or same


cc.LlamaCppCore._logits = logits
run(pick, ("address", "address" if same else "pointer+cast"), ("pass",))

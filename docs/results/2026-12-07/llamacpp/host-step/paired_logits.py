"""Paired A/B in one run: even draft calls (one a measured step) read the pass's logits through a getter typed to
return the address (this checkout), odd ones through llama-cpp-python's pointer and ctypes.cast (as before);
`same` as the last argument: both halves the new way (the control)."""
import argparse, sys
from benchmarks.suites import host_step as hs
from homespec.backends.llamacpp import head_tree as ht, core as cc
same = sys.argv[3:] == ["same"]
state = {"calls": 0, "new": True}
real_draft = ht.NativeTree.draft
def draft(self, *a, **k):
    state["new"] = same or state["calls"] % 2 == 0
    state["calls"] += 1
    return real_draft(self, *a, **k)
ht.NativeTree.draft = draft
new_logits = cc.LlamaCppCore._logits
def old_logits(self, n_out, order, view=False):
    import numpy as np
    if not n_out:
        return np.empty((0, self.n_vocab), np.float32)
    buf = self._logit_rows.rows(self._ll.llama_get_logits(self._ctx), n_out)
    if view and (order is None or cc._in_order(order, n_out)):
        return buf
    return buf.copy() if order is None else buf[np.asarray(order, dtype=np.intp)]
def logits(self, *a, **k):
    return (new_logits if state["new"] else old_logits)(self, *a, **k)
cc.LlamaCppCore._logits = logits
real_sum = hs.summarise
def summarise(shape, rows):
    assert state["calls"] % 2 == 0
    a, b = real_sum(shape, rows[0::2]), real_sum(shape, rows[1::2])
    print(f"A/B {shape}: address host {a['host_ms']} (p10 {a['host_p10_ms']}, pass {a['pass_other_ms']}) | "
          f"{'address' if same else 'pointer+cast'} host {b['host_ms']} (p10 {b['host_p10_ms']}, pass {b['pass_other_ms']})",
          flush=True)
    return real_sum(shape, rows)
hs.summarise = summarise
ap = argparse.ArgumentParser(); hs.add_arguments(ap)
hs.run(ap.parse_args(["--shapes", "tree48", "--drafter", "head", "--steps", sys.argv[1], "--rounds", sys.argv[2]]))

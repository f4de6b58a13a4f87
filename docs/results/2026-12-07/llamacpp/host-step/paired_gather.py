"""Paired A/B in one run: even draft calls (one a measured step) hand out the pass's feature rows gathered by
llama.cpp (llama_homespec_layer_rows), odd ones numpy's views per layer (FeatureRows); `same` as the last
argument: both halves the gather (the control)."""
import argparse, sys
from benchmarks.suites import host_step as hs
from homespec.backends.llamacpp import head_tree as ht, features as fe
same = sys.argv[3:] == ["same"]
state = {"calls": 0, "fn": None, "cap": None}
real_init = fe.LayerInputCapture.__init__
def init(self, *a, **k):
    real_init(self, *a, **k)
    state["cap"], state["fn"] = self, self._gather
fe.LayerInputCapture.__init__ = init
real_draft = ht.NativeTree.draft
def draft(self, *a, **k):
    use = same or state["calls"] % 2 == 0
    state["cap"]._gather = state["fn"] if use else None
    state["calls"] += 1
    return real_draft(self, *a, **k)
ht.NativeTree.draft = draft
real_sum = hs.summarise
def summarise(shape, rows):
    assert state["calls"] % 2 == 0
    a, b = real_sum(shape, rows[0::2]), real_sum(shape, rows[1::2])
    print(f"A/B {shape}: {'gather' if True else ''} host {a['host_ms']} (p10 {a['host_p10_ms']}, draft {a['draft_ms']}, "
          f"pass {a['pass_other_ms']}) | {'gather' if same else 'numpy views'} host {b['host_ms']} (p10 {b['host_p10_ms']}, "
          f"draft {b['draft_ms']}, pass {b['pass_other_ms']})", flush=True)
    return real_sum(shape, rows)
hs.summarise = summarise
ap = argparse.ArgumentParser(); hs.add_arguments(ap)
hs.run(ap.parse_args(["--shapes", "tree48", "--drafter", "head", "--steps", sys.argv[1], "--rounds", sys.argv[2]]))

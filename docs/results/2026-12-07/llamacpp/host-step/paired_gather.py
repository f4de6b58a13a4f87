"""Paired A/B within one run: the feature gather toggled step by step (even: llama.cpp gather, odd: numpy)."""
import argparse, statistics, sys
from benchmarks.suites import host_step as hs
from homespec.engine import core
state = {"n": 0, "cap": None, "fn": None}
real_step = core.Engine.step
def step(self):
    cap = self.parts.backend._capture
    if state["fn"] is None:
        state["fn"] = cap._gather
    cap._gather = state["fn"] if state["n"] % 2 == 0 else None
    state["n"] += 1
    return real_step(self)
core.Engine.step = step
real_sum = hs.summarise
def summarise(shape, rows):
    a, b = real_sum(shape, rows[0::2]), real_sum(shape, rows[1::2])
    print(f"A/B {shape}: gather host {a['host_ms']} (p10 {a['host_p10_ms']}, draft {a['draft_ms']}, pass {a['pass_other_ms']}) | "
          f"numpy host {b['host_ms']} (p10 {b['host_p10_ms']}, draft {b['draft_ms']}, pass {b['pass_other_ms']})")
    return real_sum(shape, rows)
hs.summarise = summarise
ap = argparse.ArgumentParser(); hs.add_arguments(ap)
hs.run(ap.parse_args(["--shapes", "tree48", "--drafter", "head", "--steps", sys.argv[1], "--rounds", sys.argv[2]]))

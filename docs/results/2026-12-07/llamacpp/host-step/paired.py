"""The paired scripts' scaffold: one host_step run (tree48, --drafter head) whose measured steps alternate
between two ways of doing something, so the machine's drift between runs falls on both alike.

`run(pick, names, fields)`: pick(first) sets a measured step up as the first way or the second, at its draft
call (one a measured step; the prefill drafts nothing); each round prints the even steps' figures (the first
way) against the odd steps' (the second): the host time, its p10, and `fields` of host_step's summary
("draft": the lane's own work, "pass": the pass outside llama_decode). Arguments: steps, rounds.
"""
import argparse
import sys

from benchmarks.suites import host_step as hs
from homespec.backends.llamacpp import head_tree as ht

FIELDS = {"draft": "draft_ms", "pass": "pass_other_ms"}


def run(pick, names, fields=()):
    state = {"calls": 0}
    real_draft, real_sum = ht.NativeTree.draft, hs.summarise

    def draft(self, *a, **k):
        pick(state["calls"] % 2 == 0)
        state["calls"] += 1
        return real_draft(self, *a, **k)

    def half(name, h):
        extra = "".join(f", {f} {h[FIELDS[f]]}" for f in fields)
        return f"{name} host {h['host_ms']} (p10 {h['host_p10_ms']}{extra})"

    def summarise(shape, rows):
        assert state["calls"] % 2 == 0  # each round an even number of steps: row i is draft call i of the round
        a, b = real_sum(shape, rows[0::2]), real_sum(shape, rows[1::2])
        print(f"A/B {shape}: {half(names[0], a)} | {half(names[1], b)}", flush=True)
        return real_sum(shape, rows)

    ht.NativeTree.draft, hs.summarise = draft, summarise
    ap = argparse.ArgumentParser()
    hs.add_arguments(ap)
    hs.run(ap.parse_args(["--shapes", "tree48", "--drafter", "head", "--steps", sys.argv[1], "--rounds", sys.argv[2]]))

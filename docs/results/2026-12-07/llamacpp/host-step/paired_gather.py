"""Paired A/B in one run (paired.py): even steps hand out the pass's feature rows gathered by llama.cpp
(llama_homespec_layer_rows), odd ones numpy's views per layer (FeatureRows); `same` as the last argument:
both halves the gather (the control). python paired_gather.py STEPS ROUNDS [same]"""
import sys

from homespec.backends.llamacpp import features as fe
from paired import run

same = sys.argv[3:] == ["same"]
held = {}
real_init = fe.LayerInputCapture.__init__


def init(self, *a, **k):
    real_init(self, *a, **k)
    held["cap"], held["fn"] = self, self._gather


def pick(first):
    held["cap"]._gather = held["fn"] if first or same else None


fe.LayerInputCapture.__init__ = init
run(pick, ("gather", "gather" if same else "numpy views"), ("draft", "pass"))

import sys, timeit, numpy as np
sys.path.insert(0, sys.argv[1])
from homespec.backends.llamacpp import tree as T
from homespec.speculative.tree import build_dynamic_tree
from benchmarks.suites.host_step import shape_parents
ps = [tuple(shape_parents("tree48", seed=s)) for s in range(200)]
i = [0]
def f():
    T._layout.cache_clear()
    for p in ps: T._layout(p)
t = timeit.timeit(f, number=20) / 20 / len(ps)
print(sys.argv[1], "layout miss %.1f us" % (t * 1e6), "leaves", T._layout(ps[0]).n_seq)

import argparse, statistics, sys, time, collections
import numpy as np
from benchmarks.suites import host_step as hs
from homespec.backends.llamacpp import core
acc = collections.defaultdict(list)
real = core.run_decode
a = np.zeros(10, np.int32)
def probe(tag):
    ts = []
    for i in range(6):
        t0 = time.perf_counter(); a.ctypes.data; ts.append(time.perf_counter() - t0)
    t0 = time.perf_counter(); x = sum(range(2000)); t1 = time.perf_counter()
    t2 = time.perf_counter(); x = sum(range(2000)); t3 = time.perf_counter()
    for i, t in enumerate(ts): acc[f"{tag} ctypes.data #{i}"].append(t)
    acc[f"{tag} sum2000 #0"].append(t1 - t0); acc[f"{tag} sum2000 #1"].append(t3 - t2)
def run_decode(*args, **kw):
    r = real(*args, **kw)
    probe("after decode")
    return r
core.run_decode = run_decode
real_sum = hs.summarise
def summarise(shape, rows):
    time.sleep(0.05); 
    for _ in range(20): probe("idle")
    for k, v in sorted(acc.items()): print(f"{k}: {statistics.median(v)*1e6:.2f} us")
    acc.clear()
    return real_sum(shape, rows)
hs.summarise = summarise
ap = argparse.ArgumentParser(); hs.add_arguments(ap)
hs.run(ap.parse_args(["--shapes", "tree48", "--drafter", "head", "--steps", "40", "--rounds", "1"] + sys.argv[1:]))

import sys, time, collections, argparse, functools
from benchmarks.suites import host_step as hs
from homespec.backends.llamacpp import backend as bk, core as co, batch as ba
acc = collections.defaultdict(float)
def wrap(obj, name, label):
    real = getattr(obj, name)
    @functools.wraps(real)
    def f(*a, **k):
        t0 = time.perf_counter()
        try: return real(*a, **k)
        finally: acc[label] += time.perf_counter() - t0
    setattr(obj, name, f)
real_fill = ba.Batch.fill
wrap(ba.Batch, "fill", "fill")
wrap(bk, "tree_layout", "layout")
wrap(bk, "check_tree", "check_tree")
wrap(co.LlamaCppCore, "_decode_rows", "decode_rows(incl)")
wrap(bk.LlamaCppBackend, "verify", "verify(incl)")
wrap(co, "run_decode", "run_decode(incl)")
orig = hs.measure
def measure(*a, **k):
    acc.clear()
    r = orig(*a, **k)
    n = a[4]
    print({k: round(v / n * 1e3, 4) for k, v in sorted(acc.items())})
    return r
hs.measure = measure
ap = argparse.ArgumentParser(); hs.add_arguments(ap)
hs.run(ap.parse_args(["--shapes", "tree48", "--drafter", "head", "--steps", "60", "--rounds", "1"]))

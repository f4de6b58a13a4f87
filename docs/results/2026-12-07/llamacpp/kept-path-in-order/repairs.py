import argparse, sys
from benchmarks.suites import host_step as hs
orig = hs.measure
def measure(backend, *a, **k):
    r0 = backend.order_repairs
    r = orig(backend, *a, **k)
    print("repairs", backend.order_repairs - r0, "of", a[3], "steps; flash attention", backend.flash_attn_active)
    return r
hs.measure = measure
ap = argparse.ArgumentParser(); hs.add_arguments(ap)
a = ap.parse_args(sys.argv[1:]); a.json = None
hs.run(a)

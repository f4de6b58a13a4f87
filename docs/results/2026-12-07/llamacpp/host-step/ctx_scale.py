import sys, argparse
from benchmarks.suites import host_step as hs
from homespec.backends import settings as st
n_ctx = int(sys.argv[1])
real = st.BackendSettings.__init__
import dataclasses
orig = hs.run
def patched_settings(*a, **k):
    k["n_ctx"] = n_ctx
    return RealBS(*a, **k)
RealBS = st.BackendSettings
st.BackendSettings = patched_settings
ap = argparse.ArgumentParser(); hs.add_arguments(ap)
a = ap.parse_args(sys.argv[2:] + ["--no-json"] if False else sys.argv[2:])
a.json = None
hs.run(a)

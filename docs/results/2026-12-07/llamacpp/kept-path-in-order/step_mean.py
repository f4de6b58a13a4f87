import argparse, statistics, sys
from benchmarks.suites import host_step as hs
orig = hs.summarise
def summarise(shape, rows):
    print(f"mean step {statistics.fmean(r['wall'] + r['process'] for r in rows) * 1e3:.1f} ms, mean target decode "
          f"{statistics.fmean(r['decode'] for r in rows) * 1e3:.1f} ms, tokens/step {statistics.fmean(r['emitted'] for r in rows):.2f}")
    return orig(shape, rows)
hs.summarise = summarise
ap = argparse.ArgumentParser(); hs.add_arguments(ap)
a = ap.parse_args(sys.argv[1:]); a.json = None
hs.run(a)

"""The first numpy call's cost after a gap of each kind (no llama.cpp): python idle_gap.py"""
import statistics
import time

import numpy as np

a = np.zeros(10, np.int32)
big = np.ones(80 * 1024 * 1024 // 8)  # 80 MB, about SmolLM2-135M Q4_1's weights


def probe() -> tuple[float, float]:
    t0 = time.perf_counter()
    a.ctypes.data
    t1 = time.perf_counter()
    a.ctypes.data
    t2 = time.perf_counter()
    return (t1 - t0) * 1e6, (t2 - t1) * 1e6


for label, gap in [("sleep 130ms", lambda: time.sleep(0.13)), ("sleep 5ms", lambda: time.sleep(0.005)),
                   ("stream 80MB", lambda: big.sum()), ("busy python 5ms", lambda: sum(range(200000)))]:
    r = []
    for _ in range(15):
        gap()
        r.append(probe())
    print(label, "first %.2f us, second %.2f us" % (statistics.median(x for x, _ in r),
                                                    statistics.median(y for _, y in r)))

"""The head's write of committed entries: with every row an output (embeddings on, as llama.cpp
forces with the device's top-k) against none (embeddings off for the call), alternating."""
import statistics, tempfile, time
import numpy as np
from homespec.backends.llamacpp.backend import LlamaCppBackend
from homespec.backends.llamacpp.head import LlamaCppHead, read_head_file
from homespec.backends.llamacpp.head_convert import head_gguf
from homespec.backends.settings import BackendSettings
from homespec.embedded import DEFAULT_HEAD, smollm2_path
p = smollm2_path() if callable(smollm2_path) else smollm2_path
hf = head_gguf(DEFAULT_HEAD, p, dtype="f16")
be = LlamaCppBackend(p, BackendSettings(n_ctx=2048, n_threads=2, adapt_threads=False))
info = read_head_file(hf.path, be.n_vocab)
be.set_feature_layers(info.layers)
net = LlamaCppHead(info, be, lanes=1, cells_per_lane=2048, topk=8, n_threads=2)
rng = np.random.default_rng(0)
ll = net._ll
for n in (4, 64, 512):
    toks = rng.integers(0, 1000, n).tolist()
    g = rng.standard_normal((n, net.n_embd)).astype(np.float32)
    times = {True: [], False: []}
    for r in range(6):
        for outputs in (True, False):
            net.reset(0)
            real = ll.llama_set_embeddings
            if outputs:
                ll.llama_set_embeddings = lambda *a: None  # the call as before: every row an output
            t0 = time.perf_counter()
            net.write(0, toks, g, 0)
            times[outputs].append(time.perf_counter() - t0)
            ll.llama_set_embeddings = real
    a, b = (statistics.median(times[k][1:]) * 1e3 for k in (True, False))
    print(f"write {n:4d} entries: every row an output {a:8.2f} ms, none {b:8.2f} ms ({a / b:.2f}x)")
print("draft vocab", len(info.draft_vocab), "n_embd", net.n_embd)
from homespec.backends.llamacpp import lib
warn = [l for lv, l in lib.LOG.recent if "not marked as outputs" in l]
print("warnings so far:", len(warn))
n0 = len(warn)
net.reset(0); net.write(0, toks, g, 0)
print("after a patched write:", len([l for lv, l in lib.LOG.recent if "not marked as outputs" in l]) - n0)

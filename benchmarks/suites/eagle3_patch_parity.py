"""Does homespec's llama.cpp patch (kernels/llamacpp/eagle3.1.patch) leave EAGLE-3 heads alone?

Drafts greedy chains with an EAGLE-3 (3.0) head in the installed llama.cpp and saves every draft
logit, or compares them with a saved run bit for bit. Run it once with a build without the patch
(`--save`), install the patched build, run it again (`--compare`): a 3.0 head must draft the very
same logits (docs/results/2026-12-06/head-gguf/).

The head is the EAGLE-3 twin of the shipped SmolLM2 head (fc_norm folded into norm_before_fc,
norm_output off: homespec.backends.llamacpp.head_twin), converted in f16 by head_gguf, drafted
on the first dev prompts (chat template) with llama.cpp's own eagle3 graph
(homespec.heads.llamacpp_draft). No torch.

    python -m benchmarks eagle3_patch_parity --save before.npz
    python -m benchmarks eagle3_patch_parity --compare before.npz
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from benchmarks.harness import smollm2, usage_error
from benchmarks.results import Result


def draft_all(prompts: int, k: int, cache: Path) -> dict[str, np.ndarray]:
    from homespec.backends.llamacpp.exports import eagle3_features
    from homespec.backends.llamacpp.head_convert import head_gguf
    from homespec.backends.llamacpp.lib import import_llama_cpp
    from homespec.backends.tokenizer import load_tokenizer
    from homespec.embedded import DEFAULT_HEAD
    from homespec.heads.llamacpp_draft import LlamaCppEagle3
    from homespec.promptsets import load_prompts

    import_llama_cpp()
    target = smollm2()
    conv = head_gguf(DEFAULT_HEAD, target, dtype="f16", patched=False, cache_dir=cache)
    tok = load_tokenizer(str(target))
    ids = [tok.encode(tok.chat_prompt([{"role": "user", "content": it.turns[0]}], add_generation_prompt=True),
                      add_bos=False, special=True) for it in load_prompts("dev")[:prompts]]
    out: dict[str, np.ndarray] = {"features": np.array(eagle3_features())}
    with LlamaCppEagle3(target, conv.path, n_ctx=max(len(i) for i in ids) + k + 16) as d:
        for n, ctx in enumerate(ids):
            chain = d.draft(ctx, k)
            out[f"tokens{n}"] = np.array(chain.tokens)
            out[f"logits{n}"] = chain.logits
    print(f"{conv.kind} head {conv.path.name}, llama.cpp EAGLE-3.1 features {int(out['features'])}, "
          f"{prompts} prompts x {k} steps", file=sys.stderr)
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--save", type=Path)
    ap.add_argument("--compare", type=Path)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/homespec-parity-cache"))


def run(a: argparse.Namespace) -> Result:
    if (a.save is None) == (a.compare is None):
        usage_error("pass one of --save FILE or --compare FILE", "--save with the build before, --compare after")
    now = draft_all(a.prompts, a.k, a.cache)
    if a.save:
        np.savez(a.save, **now)
        return Result(detail={"saved": str(a.save), "prompts": a.prompts, "k": a.k})
    before = dict(np.load(a.compare))
    same, rows = 0, []
    for n in range(a.prompts):
        t0, t1 = before[f"tokens{n}"], now[f"tokens{n}"]
        equal = np.array_equal(t0, t1) and np.array_equal(before[f"logits{n}"], now[f"logits{n}"])
        same += equal
        finite = np.isfinite(before[f"logits{n}"])
        diff = float(np.abs(before[f"logits{n}"][finite] - now[f"logits{n}"][finite]).max())
        rows.append({"prompt": n, "tokens_equal": bool(np.array_equal(t0, t1)), "bit_identical": bool(equal),
                     "max_logit_difference": diff})
        print(f"prompt {n}: tokens {t1.tolist()} {'==' if np.array_equal(t0, t1) else '!='} {t0.tolist()}, "
              f"max |logit difference| {diff:.3g}")
    print(f"features before {int(before['features'])}, now {int(now['features'])}; "
          f"{same}/{a.prompts} prompts bit-identical")
    return Result(rows=rows, detail={"compared": str(a.compare), "prompts": a.prompts, "k": a.k,
                                     "features_before": int(before["features"]), "features_now": int(now["features"])},
                  status=0 if same == a.prompts else 1)


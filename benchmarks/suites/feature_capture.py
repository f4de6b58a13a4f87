"""Does carrying a drafter cost plain decoding anything? One llama.cpp session, plain decoding
only, the EAGLE drafter's feature capture on (features extracted and handed to the drafter every
step, as under a guard that keeps plain decoding) and off, rounds alternating, same prompt.

    python -m benchmarks feature_capture [--rounds 6] [--prompt-tokens 1800] [--json FILE]

Prints each round's tokens/s of both settings, their medians and the ratio on/off. The spread of
the rounds is this machine's noise for a 64-token answer.
"""

from __future__ import annotations

import argparse
import json
import statistics

from benchmarks.harness import ROOT, add_rounds
from benchmarks.results import Result


def add_arguments(ap: argparse.ArgumentParser) -> None:
    add_rounds(ap, 6)
    ap.add_argument("--prompt-tokens", type=int, default=1800)
    ap.add_argument("--tokens", type=int, default=64)


def run(a: argparse.Namespace) -> Result:
    from homespec.speculative.guard import BatchGuard
    from homespec.engine.run import decode
    from homespec.session import RunOptions, Session
    from homespec.session.encode import prompt_tokens
    from homespec.speculative.steps import Limits

    s = Session.open(RunOptions(method="eagle3", backend="llamacpp", ctx=4096, draft_depth=4, draft_topk=1,
                                draft_tokens=5))
    b, d = s.backend, s.drafter
    layers = d.feature_layers
    text = (ROOT / "docs" / "speculative.md").read_text()[:12000]
    ids = prompt_tokens(s, [{"role": "user", "content": "Summarise this:\n" + text}], True)[: a.prompt_tokens]
    res: dict[str, list[float]] = {"on": [], "off": []}
    try:
        for r in range(a.rounds):
            for mode in (("on", "off") if r % 2 == 0 else ("off", "on")):
                b.reset()
                b.set_feature_layers(layers if mode == "on" else ())
                steps = list(decode(b, d if mode == "on" else None, ids,
                                      limits=Limits(max_tokens=a.tokens, stop_at_eos=False),
                                      guard=BatchGuard(depth=0)))  # plain steps, the drafter kept in step
                res[mode].append((len(steps) - 1) / sum(st.t_step for st in steps[1:]))
        b.set_feature_layers(layers)
    finally:
        s.close()
    out = {"prompt_tokens": len(ids), "tokens": a.tokens, "feature_layers": list(layers),
           "rounds_tokens_per_s": {k: [round(x, 2) for x in v] for k, v in res.items()},
           "median_on": round(statistics.median(res["on"]), 2), "median_off": round(statistics.median(res["off"]), 2)}
    out["ratio_on_off"] = round(out["median_on"] / out["median_off"], 4)
    print(json.dumps(out, indent=1))
    rows = [{"round": i + 1, "capture": k, "tokens_per_s": round(x, 2)} for k, v in res.items() for i, x in enumerate(v)]
    return Result(rows=rows, ratios={"on_over_off": out["ratio_on_off"]},
                  detail={k: out[k] for k in ("prompt_tokens", "tokens", "feature_layers", "median_on", "median_off")})


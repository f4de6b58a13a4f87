"""Three sampled answers of one prompt from one session: what a seed must reproduce (the hybrid and MTP
drafters' tests, tests/speculative/)."""

from __future__ import annotations


def seeded_runs(opt, prompt, n: int):
    """`prompt` answered with `n` tokens at temperature 0.9, top-p 0.95 by a session of `opt`: seed 7
    from an empty cache, seed 7 with the prompt reused, seed 8 from an empty cache -> the three Finishes."""
    from homespec.engine.responses import final
    from homespec.session import Session
    from homespec.speculative.sampling import Sampler
    from homespec.speculative.steps import Limits

    s = Session.open(opt)
    try:
        lim, smp = Limits(max_tokens=n, stop_at_eos=False), Sampler(temperature=0.9, top_p=0.95)
        a = final(s.stream(prompt, sampler=smp, limits=lim, seed=7, cache_prompt=False))
        b = final(s.stream(prompt, sampler=smp, limits=lim, seed=7))  # and with the prompt reused
        c = final(s.stream(prompt, sampler=smp, limits=lim, seed=8, cache_prompt=False))
    finally:
        s.close()
    return a, b, c

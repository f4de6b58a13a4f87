"""Drafting with a model's own MTP layers (`--method mtp`): the EAGLE-3 drafter's policy over another
network (homespec/backends/llamacpp/mtp.py, in llama.cpp beside the target).

An MTP block reads what an EAGLE-3 head reads, one position on: the target's hidden state at p and the
token at p + 1 (contracts/head.py's entry convention; the network shifts the positions). So everything
the head's policy does applies as it is (speculative/drafters/eagle3.py): committed entries come from
the target's own rows after each verification, a lane the guard keeps plain costs the network nothing
and catches up in one batch, and a draft is EAGLE-2's dynamic tree over the network's top-k (a chain
at top-k 1, llama.cpp's `draft-mtp` shape). Only the name differs: the guard, the per-drafter figures and
auto's choice (homespec.speculative.choice) tell MTP drafts from a head's.
"""

from __future__ import annotations

from homespec.speculative.drafters.eagle3 import HeadDrafter


class MtpDrafter(HeadDrafter):
    name = "mtp"
    reads_nextn = True  # the target's last hidden state of every row (its backend's capture_nextn)

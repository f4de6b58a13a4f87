"""The EAGLE-3 twin of an EAGLE-3.1 head as a torch head (`homespec draft export --eagle3-twin`).

The twin itself (what it changes, the fc_norm fit, the calibration features from llama.cpp) is
homespec.backends.llamacpp.head_twin, in numpy; this wraps it for a loaded torch head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from homespec.backends.llamacpp.head_twin import calibration_features, fc_norm_scales, twin_of

if TYPE_CHECKING:
    from homespec.nets.eagle3 import Eagle3Head

__all__ = ["calibration_features", "eagle3_twin", "fc_norm_scales"]


def eagle3_twin(head: "Eagle3Head", scales: Sequence[float] | None) -> "Eagle3Head":
    """A new head with norm_output off and, when the head has fc_norm, fc_norm folded into one
    norm_before_fc norm with the per-feature `scales` (fc_norm_scales)."""
    import torch

    from homespec.nets.eagle3 import Eagle3Head  # torch side, like the import above

    w = head.fc.weight
    arrays = {k: v.detach().float().cpu().numpy() for k, v in head.state_dict().items() if k != "embed_tokens.weight"}
    cfg, folded = twin_of(head.config, arrays, scales)
    twin = Eagle3Head(cfg)
    twin.load_state_dict({k: torch.from_numpy(v).to(twin.state_dict()[k].dtype) for k, v in folded.items()})
    twin.embed_tokens = head.embed_tokens
    return twin.to(w.device).eval()

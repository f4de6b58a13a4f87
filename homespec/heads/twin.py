"""The EAGLE-3 twin of an EAGLE-3.1 head: the nearest head llama.cpp's eagle3 graph can run.

EAGLE-3.1 differs from EAGLE-3 in two places, and llama.cpp's graph (src/models/eagle3.cpp) has
neither:

* fc_norm: one RMSNorm per target feature, `w_i * x_i / rms(x_i)`, before fc. llama.cpp offers
  `norm_before_fc` instead: one RMSNorm over the concatenation, `v_i * x_i / rms(x)`. The two
  agree when `v_i = w_i * rms(x) / rms(x_i)`; the ratio changes from token to token, so the twin
  takes, per feature, the constant c_i that fits it best in least squares over the target's own
  features on calibration prompts: with q_t = rms(x_i)/rms(x) at token t, minimising
  sum_t (c_i q_t - 1)^2 gives c_i = sum q_t / sum q_t^2, and v_i = c_i * w_i.
* norm_output: 3.1 feeds the next draft step norm(output); llama.cpp feeds the pre-norm output
  (common/speculative.cpp, `prenorm`). Nothing folds that: the twin feeds the raw output, so its
  drafts from depth 2 on differ from the 3.1 head's.

Depth-1 drafts differ only by the fc_norm fit. docs/interop.md has the measured acceptance of
the twin beside the 3.1 head on homespec's prompts.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    from homespec.nets.eagle3 import Eagle3Head


def fc_norm_scales(features: np.ndarray, eps: float) -> np.ndarray:
    """[N, 3*H] target features -> [3] least-squares c_i (module docstring)."""
    x = features.astype(np.float64).reshape(features.shape[0], 3, -1)  # [N, 3, H]
    part = np.sqrt((x ** 2).mean(-1) + eps)  # [N, 3] rms(x_i)
    whole = np.sqrt((x ** 2).mean((1, 2)) + eps)[:, None]  # [N, 1] rms(x)
    q = part / whole
    return q.sum(0) / (q ** 2).sum(0)


def eagle3_twin(head: "Eagle3Head", scales: Sequence[float] | None) -> "Eagle3Head":
    """A new head with norm_output off and, when the head has fc_norm, fc_norm folded into one
    norm_before_fc norm with the per-feature `scales` (fc_norm_scales)."""
    from homespec.nets.eagle3 import Eagle3Head

    c = head.config
    state = {k: v for k, v in head.state_dict().items() if not k.startswith("fc_norm.")}
    if c.fc_norm:
        import torch

        if scales is None or len(scales) != 3:
            raise ValueError("folding fc_norm needs three scales (fc_norm_scales)")
        parts = [head.fc_norm[i].weight.detach() * float(scales[i]) for i in range(3)]
        state["input_norm.weight"] = torch.cat(parts).to(head.fc.weight.dtype)
    cfg = dataclasses.replace(c, fc_norm=False, norm_output=False, norm_before_fc=c.fc_norm or c.norm_before_fc)
    twin = Eagle3Head(cfg)
    twin.load_state_dict(state)
    twin.embed_tokens = head.embed_tokens
    return twin.to(head.fc.weight.device).eval()


def calibration_features(target_gguf: str, layers: Sequence[int], prompts: int = 8, reply: int = 48) -> np.ndarray:
    """The target's features at the head's layers on `prompts` dev prompts (chat template) and
    their greedy replies, all sequences decoded together (one llama_decode per reply step)."""
    from homespec.backends.tokenizer import load_tokenizer
    from homespec.promptsets import load_prompts
    from homespec.session.encode import encode_prompt
    from homespec.train.target import BatchedLlamaTarget, Row

    tok = load_tokenizer(target_gguf)
    ids = [encode_prompt(tok, list(item.turns[:1]), chat=True) for item in load_prompts("dev")[:prompts]]
    per_seq = max(len(i) for i in ids) + reply + 1
    out = []
    with BatchedLlamaTarget(target_gguf, feature_layers=layers, n_parallel=len(ids), n_ctx=len(ids) * per_seq) as t:
        step = t.decode([Row(x, pos, seq) for seq, prompt in enumerate(ids) for pos, x in enumerate(prompt)])
        out.append(step.features)
        pos = {seq: len(prompt) for seq, prompt in enumerate(ids)}
        for _ in range(reply):
            live = {s: x for s, x in step.next_tokens.items() if x not in tok.eos_ids}
            if not live:
                break
            step = t.decode([Row(x, pos[s], s) for s, x in live.items()])
            out.append(step.features)
            pos = {s: pos[s] + 1 for s in live}
    return np.concatenate(out, 0)

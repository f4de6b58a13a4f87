"""The EAGLE-3 twin of an EAGLE-3.1 head, in numpy: the nearest head an eagle3 graph without
homespec's patch (kernels/llamacpp/eagle3.1.patch) can run.

EAGLE-3.1 differs from EAGLE-3 in two places:

* fc_norm: one RMSNorm per target feature, `w_i * x_i / rms(x_i)`, before fc. Upstream llama.cpp
  offers `norm_before_fc` instead: one RMSNorm over the concatenation, `v_i * x_i / rms(x)`. The
  two agree when `v_i = w_i * rms(x) / rms(x_i)`; the ratio changes from token to token, so the
  twin takes, per feature, the constant c_i that fits it best in least squares over the target's
  own features on calibration prompts: with q_t = rms(x_i)/rms(x) at token t, minimising
  sum_t (c_i q_t - 1)^2 gives c_i = sum q_t / sum q_t^2, and v_i = c_i * w_i.
* norm_output: 3.1 feeds the next draft step norm(output); upstream llama.cpp feeds the pre-norm
  output (common/speculative.cpp, `prenorm`). Nothing folds that: the twin feeds the raw output,
  so its drafts from depth 2 on differ from the 3.1 head's.

Depth-1 drafts differ only by the fc_norm fit. docs/interop.md has the measured acceptance of the
twin beside the 3.1 head on homespec's prompts. The calibration features come from llama.cpp
(homespec.backends.llamacpp.batched): no torch anywhere here.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from homespec.backends.llamacpp.batched import BatchedLlamaTarget, Row
from homespec.backends.llamacpp.tokenizer import LlamaCppTokenizer
from homespec.promptsets import load_prompts

if TYPE_CHECKING:
    from homespec.nets.eagle3_config import Eagle3Config

CALIBRATION_PROMPTS = 8  # dev prompts, each with its greedy reply
CALIBRATION_REPLY = 48  # tokens of reply per prompt


def fc_norm_scales(features: np.ndarray, eps: float) -> np.ndarray:
    """[N, 3*H] target features -> [3] least-squares c_i (module docstring)."""
    x = features.astype(np.float64).reshape(features.shape[0], 3, -1)  # [N, 3, H]
    part = np.sqrt((x ** 2).mean(-1) + eps)  # [N, 3] rms(x_i)
    whole = np.sqrt((x ** 2).mean((1, 2)) + eps)[:, None]  # [N, 1] rms(x)
    q = part / whole
    return q.sum(0) / (q ** 2).sum(0)


def twin_of(c: "Eagle3Config", tensors: Mapping[str, np.ndarray],
            scales: Sequence[float] | None) -> tuple["Eagle3Config", dict[str, np.ndarray]]:
    """(config, tensors) of the twin: norm_output off and, when the head has fc_norm, fc_norm folded
    into one norm_before_fc norm (`input_norm.weight`) with the per-feature `scales` (fc_norm_scales)."""
    out = {k: v for k, v in tensors.items() if not k.startswith("fc_norm.")}
    if c.fc_norm:
        if scales is None or len(scales) != 3:
            raise ValueError("folding fc_norm needs three scales (fc_norm_scales)")
        parts = [np.asarray(tensors[f"fc_norm.{i}.weight"], np.float32) * np.float32(scales[i]) for i in range(3)]
        out["input_norm.weight"] = np.concatenate(parts)
    twin = dataclasses.replace(c, fc_norm=False, norm_output=False, norm_before_fc=c.fc_norm or c.norm_before_fc)
    return twin, out


def calibration_features(target_gguf: str | os.PathLike[str], layers: Sequence[int], prompts: int = CALIBRATION_PROMPTS,
                         reply: int = CALIBRATION_REPLY) -> np.ndarray:
    """The target's features [N, 3*H] at the head's layers on `prompts` dev prompts (chat template)
    and their greedy replies, all sequences decoded together (one llama_decode per reply step)."""
    target = os.fspath(target_gguf)
    tok = LlamaCppTokenizer(target)
    try:
        ids = [tok.encode(tok.chat_prompt([{"role": "user", "content": item.turns[0]}], add_generation_prompt=True),
                          add_bos=False, special=True) for item in load_prompts("dev")[:prompts]]
        eos = set(tok.eos_ids)
    finally:
        tok.close()
    per_seq = max(len(i) for i in ids) + reply + 1
    out = []
    with BatchedLlamaTarget(target, feature_layers=layers, n_parallel=len(ids), n_ctx=len(ids) * per_seq) as t:
        step = t.decode([Row(x, pos, seq) for seq, prompt in enumerate(ids) for pos, x in enumerate(prompt)])
        out.append(step.features)
        pos = {seq: len(prompt) for seq, prompt in enumerate(ids)}
        for _ in range(reply):
            live = {s: x for s, x in step.next_tokens.items() if x not in eos}
            if not live:
                break
            step = t.decode([Row(x, pos[s], s) for s, x in live.items()])
            out.append(step.features)
            pos = {s: pos[s] + 1 for s in live}
    return np.concatenate(out, 0)

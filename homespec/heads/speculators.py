"""A head in vLLM's speculators layout (vllm-project/speculators, `Eagle3SpeculatorConfig`, read
against speculators 0.9.0), or in the published EAGLE-3 layout homespec itself reads.

speculators layout: config.json with `speculators_model_type: "eagle3"`, the decoder layer's
shape under `transformer_layer_config` (a Llama config: hidden size, heads, vocab_size = the
target's), `draft_vocab_size`, `target_hidden_size`, `eagle_aux_hidden_state_layer_ids` (the
target layers whose inputs the head reads: HF `hidden_states[i]`, so all positive),
`norm_before_residual`, `norm_before_fc`, and the EAGLE-3.1 flags `fc_norm` / `norm_output`; and
`speculators_config` (algorithm eagle3, a greedy proposal of `speculative_tokens`, the verifier's
name and architectures). Weights in model.safetensors: `fc.weight`, `fc_norm.{0,1,2}.weight`
(3.1), `input_norm.weight` (norm_before_fc), `layers.0.*` (the decoder layer, hidden_norm
inside it), `norm.weight`, `lm_head.weight`, `d2t` (int64 offsets: target = draft + d2t) and
`t2d` (bool). The target's embeddings are not written: speculators and vLLM take the verifier's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from homespec.atomic import write_text, write_with
from homespec.embedded import smollm2_path
from homespec.errors import UsageError

if TYPE_CHECKING:
    from homespec.nets.eagle3 import Eagle3Head

SPECULATORS_VERSION = "0.9.0"  # the schema this layout was written against
MARK = "exported_by"  # config.json key: a later export may replace this directory
_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
_VERIFIERS = {"llama": "LlamaForCausalLM"}
# the embedded model's published name, for the verifier vLLM loads
_EMBEDDED_VERIFIER = "HuggingFaceTB/SmolLM2-135M-Instruct"


def check_overwrite(out: Path, force: bool) -> None:
    """A new or empty directory, or one an earlier export wrote, unless --force."""
    if force or not out.exists() or not any(out.iterdir()):
        return
    cfg = out / "config.json"
    try:
        ours = json.loads(cfg.read_text()).get(MARK) == "homespec"
    except (OSError, ValueError, AttributeError):
        ours = False
    if not ours:
        raise UsageError(f"{out} is not empty and was not written by homespec draft export",
                         hint="pick a new or empty --out directory, or add --force to replace its files")


def speculators_config(head: "Eagle3Head", *, layers: Sequence[int], verifier: str, verifier_arch: str,
                       dtype: str, speculative_tokens: int = 3) -> dict[str, Any]:
    c = head.config
    layer: dict[str, Any] = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size, "num_attention_heads": c.num_attention_heads,
        "num_key_value_heads": c.num_key_value_heads, "head_dim": c.head_dim, "num_hidden_layers": 1,
        "hidden_act": "silu", "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta,
        "max_position_embeddings": c.max_position_embeddings, "vocab_size": c.vocab_size,
        "tie_word_embeddings": False, "torch_dtype": _TORCH_DTYPES[dtype],
    }
    if c.rope_scaling is not None:
        from dataclasses import asdict

        layer["rope_scaling"] = {"rope_type": "llama3", **asdict(c.rope_scaling)}
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_version": SPECULATORS_VERSION,
        "transformer_layer_config": layer,
        "draft_vocab_size": c.draft_vocab_size,
        "target_hidden_size": c.target_hidden_size,
        "eagle_aux_hidden_state_layer_ids": [int(i) for i in layers],
        "norm_before_residual": c.norm_before_residual,
        "norm_before_fc": c.norm_before_fc,
        "fc_norm": c.fc_norm,
        "norm_output": c.norm_output,
        "torch_dtype": _TORCH_DTYPES[dtype],
        "speculators_config": {
            "algorithm": "eagle3",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": speculative_tokens,
                                  "verifier_accept_k": 1, "accept_tolerance": 0.0}],
            "default_proposal_method": "greedy",
            "verifier": {"name_or_path": verifier, "architectures": [verifier_arch]},
        },
        MARK: "homespec",
    }


def _state(head: "Eagle3Head", dtype: str) -> dict[str, Any]:
    import torch

    cast = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    out = {}
    for key, t in head.state_dict().items():
        if key == "embed_tokens.weight":
            continue
        name = "layers.0." + key[len("midlayer."):] if key.startswith("midlayer.") else key
        t = t.detach().cpu()
        out[name] = (t.to(cast) if t.is_floating_point() else t).contiguous().clone()
    return out


def write(head: "Eagle3Head", out: Path, *, fmt: str, dtype: str, target: str, layers: Sequence[int],
          name: str, verifier: str | None = None, arch: str = "llama") -> int:
    """Write config.json + model.safetensors to `out` (each file atomically); returns the weights' bytes."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    if fmt == "hf":
        import copy

        import torch

        from homespec.nets.eagle3 import save_head  # torch side, like the import above

        cast = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
        save_head(copy.deepcopy(head).cpu().to(cast), out)
        cfg = json.loads((out / "config.json").read_text())
        cfg[MARK] = "homespec"
        write_text(out / "config.json", json.dumps(cfg, indent=2) + "\n")
        return (out / "model.safetensors").stat().st_size

    try:
        embedded = Path(target).resolve() == smollm2_path().resolve()
    except Exception:  # noqa: BLE001 - no embedded model installed: the target is named by its path
        embedded = False
    verifier = verifier or (_EMBEDDED_VERIFIER if embedded else str(target))
    cfg = speculators_config(head, layers=layers, verifier=verifier, verifier_arch=_VERIFIERS.get(arch, "LlamaForCausalLM"),
                             dtype=dtype)
    state = _state(head, dtype)
    write_with(out / "model.safetensors", lambda p: save_file(state, p, metadata={"format": "pt", "name": name}))
    write_text(out / "config.json", json.dumps(cfg, indent=2) + "\n")
    return (out / "model.safetensors").stat().st_size

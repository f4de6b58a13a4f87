"""The EAGLE-3 / EAGLE-3.1 draft head: one Llama decoder layer fed with fused target features.

Layout and key names follow the published checkpoints (SafeAILab/EAGLE `eagle/model/cnets.py`,
vLLM `model_executor/models/llama_eagle3.py`); docs/speculative.md ("The EAGLE-3 head") walks
through the data flow. Embeddings are the target's (`Backend.embed`) unless a checkpoint ships
its own because its width differs from the target's.

Only imported lazily (by the EAGLE drafter and the trainer), so torch is imported at the top.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
from torch import nn

from homespec.atomic import write_with
from homespec.errors import FormatError, HomespecError
from homespec.formats.hf import load_config, load_safetensors
from homespec.nets.config import llama3_freq_factors
from homespec.nets.eagle3_config import Eagle3Config, canonical_key

__all__ = ["Eagle3Config", "Eagle3Head", "HeadCache", "load_head", "parameter_bytes", "save_head"]


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(self.weight.dtype)


class HeadCache:
    """The head's own KV cache, preallocated: slots [0, length) are filled.

    The drafter keeps committed entries first and appends speculative tree levels after them;
    `truncate` drops the speculative part (or rolls back committed entries)."""

    def __init__(self, capacity: int, n_kv: int, head_dim: int, device: torch.device | str, dtype: torch.dtype):
        self.k = torch.zeros(capacity, n_kv, head_dim, device=device, dtype=dtype)  # [S, n_kv, d]
        self.v = torch.zeros_like(self.k)
        self.length = 0

    @property
    def capacity(self) -> int:
        return int(self.k.shape[0])

    def write(self, k: torch.Tensor, v: torch.Tensor) -> int:
        """Append [N, n_kv, d] keys/values; returns the first slot written."""
        n = k.shape[0]
        if self.length + n > self.capacity:
            raise HomespecError(
                f"the draft head's KV cache is full ({self.capacity} slots)",
                hint="lower --ctx or the draft tree size",
            )
        start = self.length
        self.k[start : start + n] = k
        self.v[start : start + n] = v
        self.length += n
        return start

    def truncate(self, n: int) -> None:
        if not 0 <= n <= self.length:
            raise ValueError(f"cannot truncate a cache of {self.length} slots to {n}")
        self.length = n


class _Attention(nn.Module):
    def __init__(self, c: Eagle3Config):
        super().__init__()
        self.n_head, self.n_kv, self.head_dim = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        # q/k/v read cat(input_layernorm(embedding), hidden_norm(hidden)): 2H wide.
        self.q_proj = nn.Linear(2 * c.hidden_size, c.num_attention_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=False)
        inv_freq = 1.0 / c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float64) / c.head_dim)
        if c.rope_scaling is not None:
            inv_freq = inv_freq / torch.tensor(llama3_freq_factors(c.head_dim, c.rope_theta, c.rope_scaling), dtype=torch.float64)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)  # [d/2]

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # HF half-split rotation, as the heads are trained in Hugging Face layout.
        ang = positions.float()[:, None] * self.inv_freq[None, :]  # [N, d/2]
        cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :].to(x.dtype)  # [N, 1, d]
        sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :].to(x.dtype)
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rotated * sin

    def write_kv(self, x: torch.Tensor, positions: torch.Tensor, cache: HeadCache) -> int:
        """Append the keys/values of N entries [N, 2H] to the cache; returns the first slot."""
        n = x.shape[0]
        k = self._rope(self.k_proj(x).view(n, self.n_kv, self.head_dim), positions)  # [N, kv, d]
        v = self.v_proj(x).view(n, self.n_kv, self.head_dim)
        return cache.write(k, v)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, cache: HeadCache, attend: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        q = self._rope(self.q_proj(x).view(n, self.n_head, self.head_dim), positions)  # [N, h, d]
        start = self.write_kv(x, positions, cache)
        s = start + n
        if attend.shape != (n, s):
            raise ValueError(f"attention mask must be [{n}, {s}], got {tuple(attend.shape)}")
        rep = self.n_head // self.n_kv
        keys, vals = cache.k[:s], cache.v[:s]
        used = attend.any(0)  # a windowed draft reads only its sinks + window: keep its cost flat
        if not bool(used.all()):
            cols = used.nonzero().squeeze(1)
            keys, vals, attend = keys[cols], vals[cols], attend[:, cols]
        keys = keys.repeat_interleave(rep, dim=1).transpose(0, 1)  # [h, S', d]
        vals = vals.repeat_interleave(rep, dim=1).transpose(0, 1)
        out = nn.functional.scaled_dot_product_attention(q.transpose(0, 1), keys, vals, attn_mask=attend[None])  # [h, N, d]
        return self.o_proj(out.transpose(0, 1).reshape(n, self.n_head * self.head_dim))


class _MLP(nn.Module):
    def __init__(self, c: Eagle3Config):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, c: Eagle3Config):
        super().__init__()
        self.self_attn = _Attention(c)
        self.mlp = _MLP(c)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class Eagle3Head(nn.Module):
    def __init__(self, config: Eagle3Config):
        super().__init__()
        c = self.config = config
        self.fc = nn.Linear(3 * c.target_hidden_size, c.hidden_size, bias=False)
        self.fc_norm = nn.ModuleList([RMSNorm(c.target_hidden_size, c.rms_norm_eps) for _ in range(3)]) if c.fc_norm else None
        self.input_norm = RMSNorm(3 * c.target_hidden_size, c.rms_norm_eps) if c.norm_before_fc else None
        self.midlayer = _MidLayer(c)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False)
        self.embed_tokens: nn.Embedding | None = None  # only when the checkpoint ships its own
        # target id = draft id + d2t[draft id]; t2d marks target ids the draft vocabulary holds.
        self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(c.vocab_size, dtype=torch.bool))
        if c.draft_vocab_size == c.vocab_size:
            self.t2d.fill_(True)

    @property
    def draft_to_target(self) -> torch.Tensor:
        """[V_draft] int64 target id of every draft id."""
        return torch.arange(self.config.draft_vocab_size, device=self.d2t.device) + self.d2t

    def new_cache(self, capacity: int) -> HeadCache:
        w = self.fc.weight
        return HeadCache(capacity, self.config.num_key_value_heads, self.config.head_dim, w.device, w.dtype)

    def project(self, features: torch.Tensor) -> torch.Tensor:
        """Fuse target features [N, 3*H_t] (low, mid, high) into the head's width: [N, H]."""
        features = features.to(self.fc.weight.dtype)
        if self.fc_norm is not None:
            parts = features.chunk(3, dim=-1)
            features = torch.cat([norm(part) for norm, part in zip(self.fc_norm, parts)], -1)
        if self.input_norm is not None:
            features = self.input_norm(features)
        return self.fc(features)

    def forward(
        self, emb: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache: HeadCache, attend: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step for N entries. emb: [N, H] embedding of the token at position+1; hidden: [N, H]
        (fc(features) for target features, else the head's previous output); attend: [N, S]
        bool over cache slots including the N written here. Returns (output [N, H], norm(output))."""
        layer = self.midlayer
        residual = layer.hidden_norm(hidden) if self.config.norm_before_residual else hidden
        h = residual + layer.self_attn(self._layer_input(emb, hidden), positions, cache, attend)
        h = h + layer.mlp(layer.post_attention_layernorm(h))  # [N, H]
        return h, self.norm(h)

    def write_kv(self, emb: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor, cache: HeadCache) -> None:
        """Only the cache entries of N steps, as forward() would write them. With one decoder layer
        an entry's key and value depend on its own inputs alone, so committed entries whose
        outputs nobody reads need neither attention nor the MLP."""
        self.midlayer.self_attn.write_kv(self._layer_input(emb, hidden), positions, cache)

    def _layer_input(self, emb: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """What q/k/v read: cat(input_layernorm(embedding), hidden_norm(hidden)), [N, 2H]."""
        layer = self.midlayer
        return torch.cat([layer.input_layernorm(emb.to(hidden.dtype)), layer.hidden_norm(hidden)], -1)

    def next_hidden(self, out: torch.Tensor, normed: torch.Tensor) -> torch.Tensor:
        """What the next draft step consumes: the raw output (EAGLE-3) or its norm (EAGLE-3.1)."""
        return normed if self.config.norm_output else out

    def log_probs(self, normed: torch.Tensor) -> torch.Tensor:
        """[N, H] -> [N, V_draft] float32 log-probabilities over the draft vocabulary."""
        return torch.log_softmax(self.lm_head(normed).float(), dim=-1)


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    st, pt = directory / "model.safetensors", directory / "pytorch_model.bin"
    if not st.is_file() and not pt.is_file():
        raise FormatError(f"{directory}: no model.safetensors or pytorch_model.bin", hint="download the head's weights too")
    if st.is_file():
        raw = load_safetensors(st)
    else:
        try:
            raw = torch.load(str(pt), map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, ValueError, EOFError) as exc:
            raise FormatError(f"{pt}: cannot read the head's weights ({exc})", hint="the file may be truncated; download it again") from exc
    return {canonical_key(k): v for k, v in raw.items()}


def read_config(directory: Path) -> Eagle3Config:
    """A head directory's config.json (read as homespec.formats.hf reads every config.json); a
    malformed one is a FormatError naming it, never a TypeError from deep inside."""
    if not (directory / "config.json").exists():
        raise FormatError(f"{directory}: no config.json", hint="pass the directory of an EAGLE-3 head")
    cfg = load_config(directory)
    try:
        return Eagle3Config.from_dict(cfg, str(directory))
    except (TypeError, ValueError, AttributeError, ZeroDivisionError) as exc:
        raise FormatError(f"{directory / 'config.json'}: a setting is malformed ({' '.join(str(exc).split())})",
                          hint="the head's config.json is damaged; download or export the head again") from None


def load_head(
    path: str | Path,
    target_n_layer: int,
    target_hidden: int,
    target_vocab: int,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Eagle3Head:
    """Load config.json + weights from a directory and check the head fits its target."""
    directory = Path(path)
    config = read_config(directory)
    weights = _read_weights(directory)
    if not config.fc_norm and "fc_norm.0.weight" in weights:
        config = dataclasses.replace(config, fc_norm=True)  # older configs omit the flag
    _check_target(config, target_n_layer, target_hidden, target_vocab, str(directory))

    head = Eagle3Head(config)
    expected = head.state_dict()
    missing = [k for k in expected if k not in weights and k not in ("d2t", "t2d")]
    if missing:
        raise FormatError(f"{directory}: the head lacks {', '.join(missing[:4])}", hint="is this an EAGLE-3 checkpoint?")
    if "d2t" not in weights and config.draft_vocab_size != config.vocab_size:
        raise FormatError(f"{directory}: a reduced draft vocabulary needs d2t", hint="the checkpoint is incomplete")
    state = {}
    for key, ref in expected.items():
        w = weights.get(key, ref)
        if tuple(w.shape) != tuple(ref.shape):
            raise FormatError(f"{directory}: {key} has shape {tuple(w.shape)}, the config implies {tuple(ref.shape)}", hint="config.json and the weights disagree")
        state[key] = w
    if "t2d" not in weights:
        t2d = torch.zeros(config.vocab_size, dtype=torch.bool)
        t2d[torch.arange(config.draft_vocab_size) + state["d2t"].long()] = True
        state["t2d"] = t2d
    emb = weights.get("embed_tokens.weight")
    if config.hidden_size != target_hidden:
        if emb is None or tuple(emb.shape) != (target_vocab, config.hidden_size):
            raise HomespecError(f"{directory}: the head is {config.hidden_size} wide but the target's embeddings are {target_hidden}", hint="such a head must ship embed_tokens.weight")
        head.embed_tokens = nn.Embedding(target_vocab, config.hidden_size)
        state["embed_tokens.weight"] = emb
    head.load_state_dict(state)
    head.d2t = head.d2t.long()
    head.t2d = head.t2d.bool()
    return head.to(device=device, dtype=dtype).eval()


def _check_target(c: Eagle3Config, n_layer: int, hidden: int, vocab: int, where: str) -> None:
    if c.target_hidden_size != hidden:
        raise HomespecError(f"{where}: the head reads {c.target_hidden_size}-wide target features, the target's hidden size is {hidden}", hint="use a head trained for this target")
    if c.vocab_size != vocab:
        raise HomespecError(f"{where}: the head's target vocabulary is {c.vocab_size} tokens, the target has {vocab}", hint="use a head trained for this target")
    layers = c.feature_layers(n_layer)
    if len(layers) != 3 or min(layers) < 0 or max(layers) >= n_layer:
        raise HomespecError(f"{where}: the head reads target layers {list(layers)}, the target has {n_layer} layers", hint="use a head trained for this target")


def save_head(head: Eagle3Head, directory: str | Path) -> None:
    """Write config.json + model.safetensors (the published layout, with d2t/t2d) atomically."""
    from safetensors.torch import save_file

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu().contiguous().clone() for k, v in head.state_dict().items()}
    for name, write in (
        ("model.safetensors", lambda p: save_file(state, p, metadata={"format": "pt"})),
        ("config.json", lambda p: Path(p).write_text(json.dumps(head.config.to_dict(), indent=2) + "\n")),
    ):
        write_with(out / name, write)


def parameter_bytes(head: Eagle3Head) -> int:
    """Bytes of the head's weights as loaded (embeddings are the target's)."""
    return sum(p.numel() * p.element_size() for p in head.parameters())

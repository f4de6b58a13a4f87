"""Self-distillation: the target answers the training prompts; every position is recorded.

The target replies greedily (temperature 0) with its own chat template; multi-turn items get
each assistant turn generated before the next user turn is appended. For every position we keep
the token, the inputs of the head's three target layers, and the final normed hidden state, from
which training recomputes the target's logits over the draft vocabulary exactly (logits =
hidden @ output_matrix[draft ids]^T) instead of storing 49k logits per token.

Prompts are processed shard by shard (`shard_prompts` prompts each) in an order fixed by the
seed; `skip_shards` starts at a later shard of that order, so that a warm-started head (`draft
train --init`) can go on learning from prompts its first run never answered. Within a shard up
to `parallel` sequences are decoded in one llama_decode call: a slot that finishes takes the
next prompt of the shard. Every shard starts from an empty cache, so its batches (and hence its
numbers) do not depend on whether the run was resumed.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from homespec.backends.llamacpp.batched import BatchedLlamaTarget, Row
from homespec.backends.tokenizer import load_tokenizer
from homespec.errors import HomespecError, UsageError
from homespec.limits import surely_longer
from homespec.promptsets import PromptItem
from homespec.train.progress import Progress, ProgressFn
from homespec.train.shards import FORMAT_VERSION, Record, read_manifest, shard_name, write_manifest, write_shard
from homespec.train.torch_target import BatchedTorchTarget


@dataclass(frozen=True, slots=True)
class DataSummary:
    data_dir: Path
    shards: int
    prompts: int
    tokens: int  # all positions stored
    generated: int  # reply tokens written by the target
    seconds: float  # time spent generating in this call
    generated_now: int  # reply tokens generated in this call

    @property
    def tokens_per_second(self) -> float:
        return self.generated_now / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Slot:
    """One sequence being decoded (mutable, lives inside one shard's loop)."""

    seq: int
    prompt_index: int
    item: PromptItem
    messages: list[dict[str, str]]
    turn: int = 0
    tokens: list[int] = field(default_factory=list)  # decoded positions
    generated: list[bool] = field(default_factory=list)
    features: list[np.ndarray] = field(default_factory=list)  # chunks of [n, 3H] fp16
    hidden: list[np.ndarray] = field(default_factory=list)  # chunks of [n, H] fp16
    pending: list[int] = field(default_factory=list)  # to decode in the next batch
    pending_gen: list[bool] = field(default_factory=list)
    reply: list[int] = field(default_factory=list)  # tokens of the reply being generated
    closing: bool = False  # the last token is pending; the sequence ends after its decode

    def truncate(self, n: int) -> None:
        """Keep the first n decoded positions."""
        feats = np.concatenate(self.features) if self.features else np.empty((0, 0), np.float16)
        hid = np.concatenate(self.hidden) if self.hidden else np.empty((0, 0), np.float16)
        self.features, self.hidden = [feats[:n]], [hid[:n]]
        del self.tokens[n:], self.generated[n:]


def open_target(target: str, *, backend: str, feature_layers: Sequence[int], parallel: int, n_ctx: int,
                n_threads: int | None, device: str | None):
    if backend == "llamacpp":
        return BatchedLlamaTarget(target, feature_layers=feature_layers, n_parallel=parallel, n_ctx=n_ctx, n_threads=n_threads)
    if backend == "torch":
        return BatchedTorchTarget(target, feature_layers=feature_layers, n_parallel=parallel, n_ctx=n_ctx, device=device)
    raise UsageError(f"unknown backend {backend!r} for data generation", hint="use llamacpp (GGUF) or torch")


def ordered_prompts(prompts: Sequence[PromptItem], seed: int) -> list[PromptItem]:
    items = list(prompts)
    random.Random(seed).shuffle(items)
    return items


def generate_data(
    target: str | os.PathLike[str],
    data_dir: str | os.PathLike[str],
    prompts: Sequence[PromptItem],
    *,
    tokens: int,
    max_new_tokens: int = 256,
    seed: int = 0,
    feature_layers: Sequence[int],
    backend: str = "llamacpp",
    parallel: int = 16,
    shard_prompts: int = 64,
    skip_shards: int = 0,
    seq_budget: int = 1024,
    n_threads: int | None = None,
    device: str | None = None,
    progress: ProgressFn | None = None,
) -> DataSummary:
    """Generate (or resume generating) until `tokens` reply tokens are stored or prompts run out.

    `seq_budget`: KV cells per parallel sequence (prompt + replies); a sequence that reaches it
    ends early. `skip_shards`: begin at that shard of the seed's order (shard k holds the same
    prompts, and the same numbers, whatever the skip). Reruns with the same settings skip the
    shards already written."""
    target = os.fspath(target)
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    order = ordered_prompts(prompts, seed)
    n_shards = (len(order) + shard_prompts - 1) // shard_prompts
    if skip_shards and skip_shards >= n_shards:
        raise UsageError(f"--skip-shards {skip_shards} leaves no prompts: {len(order)} prompts make {n_shards} shards "
                         f"of {shard_prompts}", hint=f"use 0 to {max(n_shards - 1, 0)}, or more prompts")
    settings = {
        "version": FORMAT_VERSION, **target_settings(target, feature_layers),
        "seed": seed, "max_new_tokens": max_new_tokens,
        "shard_prompts": shard_prompts, "n_prompts": len(order), "first_prompt": order[0].id if order else None,
        "parallel": parallel, "backend": backend, "seq_budget": seq_budget,
    }
    if skip_shards:  # (absent, not 0, when unused: data made before the option still resumes)
        settings["skip_shards"] = skip_shards
    manifest = _resumable_manifest(data_dir, settings)
    done_gen = sum(s["generated"] for s in manifest["shards"])
    first = skip_shards + len(manifest["shards"])
    t_start, gen_now = time.perf_counter(), 0
    if done_gen < tokens and first < n_shards:
        model = open_target(target, backend=backend, feature_layers=feature_layers, parallel=parallel,
                            n_ctx=parallel * seq_budget, n_threads=n_threads, device=device)
        try:
            run = _ShardRun(model, load_tokenizer(target), data_dir, manifest, order, shard_prompts,
                            max_new_tokens, seq_budget, tokens, done_gen, progress)
            run.shards(range(first, n_shards))
            done_gen, gen_now = run.done_gen, run.gen_now
        finally:
            model.close()
    seconds = time.perf_counter() - t_start
    return DataSummary(data_dir, len(manifest["shards"]), sum(s["sequences"] for s in manifest["shards"]),
                       sum(s["tokens"] for s in manifest["shards"]), done_gen, seconds, gen_now)


def _resumable_manifest(data_dir: Path, settings: dict[str, Any]) -> dict[str, Any]:
    """The directory's manifest, or a new one; data made with other settings is never mixed in."""
    manifest = read_manifest(data_dir) or {**settings, "shards": []}
    changed = [k for k in dict.fromkeys([*settings, "skip_shards"]) if manifest.get(k) != settings.get(k)]
    if changed:
        raise HomespecError(
            f"{data_dir} holds data made with other settings ({', '.join(changed)})",
            hint="rerun with the original settings to resume, or choose a new --out directory",
        )
    return manifest


@dataclass
class _ShardRun:
    """Shards generated one after another, each written (and the manifest after it) before the next."""

    model: Any
    tok: Any
    data_dir: Path
    manifest: dict[str, Any]
    order: list[PromptItem]
    shard_prompts: int
    max_new_tokens: int
    seq_budget: int
    tokens: int  # stop once this many reply tokens are stored
    done_gen: int  # reply tokens stored, this run's finished shards included
    progress: ProgressFn | None
    gen_now: int = 0  # reply tokens this run generated (for the rate)
    t_start: float = field(default_factory=time.perf_counter)

    def shards(self, ks: range) -> None:
        for k in ks:
            if self.done_gen >= self.tokens:
                break
            self.shard(k)

    def shard(self, k: int) -> None:
        lo = k * self.shard_prompts
        items = self.order[lo : lo + self.shard_prompts]
        records = _run_shard(self.model, self.tok, items, lo, max_new_tokens=self.max_new_tokens,
                             seq_budget=self.seq_budget, report=lambda n_new: self.report(k, n_new))
        write_shard(self.data_dir, k, records)
        gen = int(sum(r.generated.sum() for r in records))
        self.manifest["shards"].append({
            "name": shard_name(k), "prompts": [lo, lo + len(items)], "sequences": len(records),
            "tokens": int(sum(len(r.tokens) for r in records)), "generated": gen,
        })
        write_manifest(self.data_dir, self.manifest)
        self.done_gen += gen
        self.gen_now += gen

    def report(self, k: int, n_new: int) -> None:
        if self.progress is not None:
            dt = time.perf_counter() - self.t_start
            self.progress(Progress("data", min(self.done_gen + n_new, self.tokens), self.tokens,
                                   {"shard": k, "tok/s": (self.gen_now + n_new) / dt if dt > 0 else 0.0}))


def target_settings(target: str, feature_layers: Sequence[int]) -> dict[str, Any]:
    """The settings that tie data to its target: whose features these are (also what
    `draft train --data-from` checks before pooling another run's data)."""
    return {"target": os.path.basename(target), "target_bytes": _size(target), "feature_layers": list(feature_layers)}


def _size(path: str) -> int:
    try:
        return os.path.getsize(path) if os.path.isfile(path) else -1
    except OSError:
        return -1


def _encode_chat(tok: Any, messages: list[dict[str, str]]) -> list[int]:
    return tok.encode(tok.chat_prompt(messages, add_generation_prompt=True), add_bos=True, special=True)


def _run_shard(model: Any, tok: Any, items: Sequence[PromptItem], first_index: int, *, max_new_tokens: int,
               seq_budget: int, report) -> list[Record]:
    """Answer one shard's prompts with up to model.n_parallel sequences per decode."""
    model.clear()
    queue = list(enumerate(items, start=first_index))
    free = list(range(model.n_parallel))
    active: dict[int, _Slot] = {}
    done: list[Record] = []
    eos = tok.eos_ids
    n_new = 0

    def start(seq: int) -> None:
        while queue:
            index, item = queue.pop(0)
            messages = [{"role": "user", "content": item.turns[0]}]
            if surely_longer(item.turns[0], seq_budget):  # skipped below anyway: never tokenized
                continue
            ids = _encode_chat(tok, messages)
            if len(ids) + 2 > seq_budget:
                continue  # a prompt longer than a slot's cells is skipped (recorded as nothing)
            active[seq] = _Slot(seq, index, item, messages, pending=ids, pending_gen=[False] * len(ids))
            return
        free.append(seq)

    for seq in sorted(free):
        free.remove(seq)
        start(seq)
    while active:
        rows = [Row(t, len(s.tokens) + i, s.seq) for s in active.values() for i, t in enumerate(s.pending)]
        out = model.decode(rows)
        at = 0
        for s in list(active.values()):
            n = len(s.pending)
            s.features.append(out.features[at : at + n].astype(np.float16))
            s.hidden.append(out.hidden[at : at + n].astype(np.float16))
            at += n
            s.tokens += s.pending
            s.generated += s.pending_gen
            s.pending, s.pending_gen = [], []
            if s.closing:
                done.append(_finish(s))
                del active[s.seq]
                model.drop(s.seq)
                start(s.seq)
                continue
            nxt = out.next_tokens[s.seq]
            s.reply.append(nxt)
            n_new += 1
            full = len(s.tokens) + 1 >= seq_budget
            if nxt in eos or len(s.reply) >= max_new_tokens or full:
                _end_turn(s, tok, model, full, seq_budget)
            else:
                s.pending, s.pending_gen = [nxt], [True]
        report(n_new)
    done.sort(key=lambda r: r.prompt_index)
    return done


def _end_turn(s: _Slot, tok: Any, model: Any, full: bool, seq_budget: int) -> None:
    """The reply is complete: either close the sequence or append the next user turn."""
    last = s.reply[-1]
    s.turn += 1
    if full or s.turn >= len(s.item.turns):
        s.pending, s.pending_gen, s.closing = [last], [True], True
        return
    text = tok.decode([t for t in s.reply if t not in tok.eos_ids])
    s.messages += [{"role": "assistant", "content": text}, {"role": "user", "content": s.item.turns[s.turn]}]
    s.reply = []
    # Re-render the whole conversation with the template; keep the longest prefix that matches
    # what is already in the cache (the reply re-tokenises to the same ids almost always).
    full_ids = _encode_chat(tok, s.messages)
    old, old_gen = s.tokens + [last], s.generated + [True]
    lcp = 0
    while lcp < min(len(old), len(full_ids)) and old[lcp] == full_ids[lcp]:
        lcp += 1
    keep = min(lcp, len(s.tokens))
    if keep < len(s.tokens):
        s.truncate(keep)
        model.drop(s.seq, keep)
    s.pending = full_ids[keep:]
    s.pending_gen = [old_gen[keep + i] if keep + i < lcp else False for i in range(len(s.pending))]
    if not s.pending or keep + len(s.pending) + 2 > seq_budget:
        s.pending, s.pending_gen, s.closing = [last], [True], True


def _finish(s: _Slot) -> Record:
    return Record(
        prompt_index=s.prompt_index,
        tokens=np.asarray(s.tokens, dtype=np.int32),
        features=np.concatenate(s.features),
        hidden=np.concatenate(s.hidden),
        generated=np.asarray(s.generated, dtype=bool),
    )

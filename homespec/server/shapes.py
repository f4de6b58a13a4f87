"""The response bodies, in OpenAI's shapes, built from an answer's Finish.

Beyond OpenAI's fields, every answer carries llama-server's `timings` (cache_n, prompt_n, prompt_ms,
predicted_n, predicted_ms, predicted_per_second, draft_n, draft_n_accepted) and homespec's own
figures under `homespec` (tokens per target pass, target passes, speculative steps).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from homespec.engine.responses import Finish

# homespec's reasons -> OpenAI's: the context's end is a length limit too
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length", "context": "length", None: "stop"}


@dataclass(frozen=True)
class Answer:
    """What every body of one request shares: its id, when it was made, the served model name."""

    kind: str  # "chat" | "text"
    model: str
    id: str = field(default_factory=lambda: secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))

    def head(self, object_: str) -> dict[str, Any]:
        prefix = "chatcmpl-" if self.kind == "chat" else "cmpl-"
        return {"id": prefix + self.id, "object": object_, "created": self.created, "model": self.model,
                "system_fingerprint": None}


def usage(fin: "Finish", reasoning_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage; prompt_tokens_details.cached_tokens: the prompt tokens a slot's cache held;
    completion_tokens_details.reasoning_tokens: the answer's thinking (homespec/server/outputs.py)."""
    prompt, completion = len(fin.prompt_token_ids), len(fin.token_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": fin.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}}


def timings(fin: "Finish") -> dict[str, float | int]:
    """llama-server's figures: cache_n prompt tokens reused from a slot's cache, prompt_n the ones
    processed (prompt_ms: their pass and the first token), predicted_per_second the tokens after
    the first over the time after it (Finish.tokens_per_s)."""
    spec = [s for s in fin.steps if s.speculative and s.draft_size > 0]
    return {"cache_n": fin.cached_tokens, "prompt_n": len(fin.prompt_token_ids) - fin.cached_tokens,
            "prompt_ms": round(fin.prefill_s * 1e3, 3),
            "predicted_n": len(fin.token_ids), "predicted_ms": round(fin.decode_s * 1e3, 3),
            "predicted_per_second": round(fin.tokens_per_s, 3),
            "draft_n": sum(s.draft_size for s in spec), "draft_n_accepted": sum(s.accepted for s in spec)}


def figures(fin: "Finish") -> dict[str, float | int]:
    """homespec's own: tokens emitted per target pass after the prefill (EAGLE's tau)."""
    return {"tokens_per_target_pass": round(fin.mean_accepted, 4), "target_passes": fin.target_passes,
            "speculative_steps": sum(1 for s in fin.steps if s.speculative and s.draft_size > 0)}


def _tail(fin: "Finish", reasoning_tokens: int = 0) -> dict[str, Any]:
    return {"usage": usage(fin, reasoning_tokens), "timings": timings(fin), "homespec": figures(fin)}


def reason_of(fin: "Finish", called: bool = False) -> str:
    """OpenAI's finish_reason; "tool_calls" for an answer that ended after calling tools."""
    reason = FINISH_REASONS.get(fin.finish, "stop")
    return "tool_calls" if called and reason == "stop" else reason


def completion(a: Answer, fin: "Finish", *, message: dict[str, Any] | None = None, text: str | None = None,
               logprobs: dict[str, Any] | None = None, reasoning_tokens: int = 0) -> dict[str, Any]:
    """The whole answer: chat.completion (`message`: content, reasoning_content, tool_calls; default
    the text) or text_completion (`text`: default the answer's)."""
    if a.kind == "chat":
        message = message or {"role": "assistant", "content": fin.text, "refusal": None}
        choice = {"index": 0, "message": message, "logprobs": logprobs,
                  "finish_reason": reason_of(fin, bool(message.get("tool_calls")))}
        return {**a.head("chat.completion"), "choices": [choice], **_tail(fin, reasoning_tokens)}
    choice = {"index": 0, "text": fin.text if text is None else text, "logprobs": logprobs,
              "finish_reason": reason_of(fin)}
    return {**a.head("text_completion"), "choices": [choice], **_tail(fin)}


def chunk(a: Answer, text: str | None = None, *, first: bool = False, fin: "Finish | None" = None,
          usage_only: bool = False, delta: dict[str, Any] | None = None, logprobs: dict[str, Any] | None = None,
          called: bool = False, reasoning_tokens: int = 0) -> dict[str, Any]:
    """One SSE chunk: the role first (chat), then text (or a `delta` of reasoning_content and
    tool_calls), then the finish reason with the timings; with stream_options.include_usage, a
    last chunk of no choices and the usage."""
    if usage_only:
        assert fin is not None
        return {**a.head("chat.completion.chunk" if a.kind == "chat" else "text_completion"), "choices": [],
                "usage": usage(fin, reasoning_tokens)}
    reason = reason_of(fin, called) if fin is not None else None
    if a.kind == "chat":
        body_delta: dict[str, Any] = {"role": "assistant", "content": ""} if first else dict(delta or {})
        if text:
            body_delta["content"] = text
        choice = {"index": 0, "delta": body_delta, "logprobs": logprobs, "finish_reason": reason}
        body = {**a.head("chat.completion.chunk"), "choices": [choice]}
    else:
        body = {**a.head("text_completion"), "choices": [{"index": 0, "text": text or "", "logprobs": logprobs,
                                                          "finish_reason": reason}]}
    if fin is not None:
        body.update(timings=timings(fin), homespec=figures(fin))
    return body


def models(name: str, created: int) -> dict[str, Any]:
    return {"object": "list", "data": [model(name, created)]}


def model(name: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": "homespec"}

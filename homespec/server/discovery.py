"""What clients read before they ask anything: llama-server's discovery routes over the engine.

    GET  /v1/models, /v1/models/{id}   the one model, with llama-server's `meta` (n_ctx_train, n_params, size, ...)
    GET  /props                        model, context, chat template, default generation settings, speculation
    GET  /slots                        each lane: processing or not, the tokens its cache holds
    POST /tokenize, /detokenize        text <-> the model's token ids
    POST /apply-template               a chat request's prompt as the model reads it (tools included)
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import APIRouter
from pydantic import StrictBool, StrictInt, StrictStr, field_validator

from homespec.speculative.methods import method_entry
from homespec.server import errors
from homespec.server.answers import Defaults
from homespec.server.chat import ChatSettings, prepare
from homespec.server.schemas import MAX_TOKEN_ID, ChatRequest, _Body, _text

if TYPE_CHECKING:
    from homespec.engine.core import Engine

MAX_DETOKENIZE = 1 << 16  # ids per /detokenize beyond the context (a whole conversation of a small one)
DEFAULTS = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "max_tokens": -1, "n_predict": -1, "stop": [],
            "seed": -1, "stream": False, "cache_prompt": True}  # the request fields' defaults (docs/server.md)


def params(defaults: Defaults) -> dict[str, Any]:
    """/props' default_generation_settings.params: the request fields' defaults, serve's flags in."""
    mine = {"temperature": defaults.temperature, "top_k": defaults.top_k, "top_p": defaults.top_p,
            "max_tokens": defaults.max_tokens, "n_predict": defaults.max_tokens}
    return {**DEFAULTS, **{k: v for k, v in mine.items() if v is not None}}


class TokenizeRequest(_Body):
    content: StrictStr
    _utf8 = field_validator("content")(lambda cls, v: _text(v))  # a lone surrogate is a 400, as for chat
    add_special: StrictBool = False  # BOS, where the vocabulary asks for one
    parse_special: StrictBool = True  # text that spells a special token is that token
    with_pieces: StrictBool = False


class DetokenizeRequest(_Body):
    tokens: list[StrictInt]  # checked against the vocabulary below


def discovery_routes(engine: "Engine", model_name: str, created: int, chat: ChatSettings | None,
                     defaults: Defaults = Defaults()) -> APIRouter:
    router = APIRouter()

    @router.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [model_entry(engine, model_name, created)]}

    @router.get("/v1/models/{name:path}")
    async def one_model(name: str):
        if name != model_name:
            raise errors.ApiError(404, f"no model '{name}' here; this server serves '{model_name}'",
                                  param="model", code="model_not_found")
        return model_entry(engine, model_name, created)

    @router.get("/props")
    async def props():
        return properties(engine, model_name, defaults)

    @router.get("/slots")
    async def slots():
        """llama-server's /slots: each slot (lane), whether it is processing, the tokens it holds."""
        return engine.slots_info()

    @router.post("/tokenize")
    async def tokenize(body: TokenizeRequest):
        tok = engine.tokenizer
        ids = await anyio.to_thread.run_sync(lambda: tok.encode(body.content, add_bos=body.add_special,
                                                                special=body.parse_special))
        if not body.with_pieces:
            return {"tokens": ids}
        return {"tokens": [{"id": i, "piece": tok.decode([i], special=True)} for i in ids]}  # type: ignore[call-arg]

    @router.post("/detokenize")
    async def detokenize(body: DetokenizeRequest):
        most = max(engine.lane_ctx, MAX_DETOKENIZE)
        if len(body.tokens) > most:  # more than any text this server reads or writes
            raise errors.ApiError(400, f"tokens: {len(body.tokens):,} ids; this server detokenizes at most {most:,} "
                                  f"at once (its context holds {engine.lane_ctx:,})", param="tokens",
                                  code="invalid_value")
        bad = [t for t in body.tokens if not 0 <= t < min(engine.n_vocab, MAX_TOKEN_ID + 1)]
        if bad:
            raise errors.ApiError(400, f"tokens: id {bad[0]} is not in the model's vocabulary", param="tokens")
        return {"content": await anyio.to_thread.run_sync(engine.tokenizer.decode, body.tokens)}

    @router.post("/apply-template")
    async def apply_template(body: ChatRequest):
        turn = await anyio.to_thread.run_sync(prepare, engine.tokenizer, chat or ChatSettings(None, False), body)
        return {"prompt": turn.prompt}

    return router


def model_entry(engine: "Engine", name: str, created: int) -> dict[str, Any]:
    """OpenAI's model object with llama-server's `meta`."""
    return {"id": name, "object": "model", "created": created, "owned_by": "homespec", "meta": meta(engine)}


def meta(engine: "Engine") -> dict[str, Any]:
    plan = getattr(engine.parts, "plan", None)
    spec = plan.model if plan is not None else None
    size = spec.file_bytes if spec is not None and spec.file_bytes else _file_size(engine.model_path)
    return {"n_vocab": engine.n_vocab, "n_ctx_train": spec.n_ctx_train if spec is not None else None,
            "n_embd": spec.n_embd if spec is not None else None,
            "n_params": spec.n_params if spec is not None else None, "size": size, "n_ctx": engine.lane_ctx}


def properties(engine: "Engine", name: str, defaults: Defaults = Defaults()) -> dict[str, Any]:
    """llama-server's /props: what a client reads at start, with homespec's speculation
    (`defaults`: serve's --max-tokens, llama-server's n_predict, -1 when unset; its sampling flags)."""
    tok = engine.tokenizer
    template = getattr(tok, "chat_template", None)
    opt = engine.parts.options
    speculative = {"method": opt.method, "guard": opt.guard, "draft": opt.draft,
                   "draft_depth": engine.parts.shape.depth if engine.parts.shape is not None else 0,
                   "draft_tokens": engine.parts.shape.total if engine.parts.shape is not None else 0}
    return {"default_generation_settings": {"n_ctx": engine.lane_ctx, "speculative": method_entry(opt.method).speculative,
                                            "params": params(defaults)},
            "total_slots": engine.slots, "model_alias": name, "model_path": engine.model_path,
            "n_ctx": engine.lane_ctx, "modalities": {"vision": False, "audio": False},
            "chat_template": template.source if template is not None else None,
            "bos_token": template.bos_token if template is not None else "",
            "eos_token": template.eos_token if template is not None else "",
            "build_info": "homespec", "speculative": speculative}


def _file_size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


"""`homespec serve`: an OpenAI-compatible HTTP server for the model, with speculative decoding."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from homespec import limits
from homespec.cli import lazy
from homespec.cli.app import app
from homespec.cli.options import (
    AdaptOpt, BackendOpt, CtxOpt, DepthOpt, DeviceOpt, DraftOpt, ExactOpt, GuardOpt, MethodOpt, ModelOpt, NodesOpt,
    ThreadsOpt, TopkOpt, WindowOpt, DraftDtypeOpt, RunArgs, number,
)
from homespec.chatformat.reasoning import FORMATS as REASONING_FORMATS
from homespec.errors import UsageError
from homespec.plan.settings import DEFAULT_CTX


@app.command()
def serve(
    model: ModelOpt = None,
    draft: DraftOpt = None,
    method: MethodOpt = "auto",
    backend: BackendOpt = "llamacpp",
    host: Annotated[str, typer.Option("--host", help="Address to listen on. Anything but loopback needs --api-key to be safe.")] = "127.0.0.1",
    port: Annotated[int, number(limits.PORT, help="Port to listen on (0: any free port).")] = 8080,
    api_key: Annotated[Optional[str], typer.Option("--api-key", envvar="HOMESPEC_API_KEY", show_envvar=True, help="Require `Authorization: Bearer KEY` on every route but /health.")] = None,
    alias: Annotated[Optional[str], typer.Option("--alias", "--model-name", help="The model's id in /v1/models and in answers. Default: the model file's name.")] = None,
    parallel: Annotated[Optional[int], number(limits.PARALLEL, "--parallel", "-np", help="Sequences decoded at once, each with --ctx tokens of KV. Default: 4 on llama.cpp where the plan fits the KV for 4 as well as for 1 (else 2 or 1); 1 on torch, exl2 and --method draft.")] = None,
    queue: Annotated[int, number(limits.QUEUE, help="Requests that may wait for a slot; beyond them: 503 with Retry-After.")] = 32,
    cache_prompt: Annotated[bool, typer.Option("--cache-prompt/--no-cache-prompt", help="Keep each slot's KV after an answer and reuse the longest shared prefix of the next prompt (a request's own cache_prompt: false opts out).")] = True,
    cache_ram: Annotated[int, number(limits.CACHE_RAM_MIB, help="MiB of host RAM for idle conversations' states: saved when another request takes their slot, loaded when they come back (llama.cpp targets; 0 = off).")] = 0,
    max_body_mib: Annotated[int, number(limits.MAX_BODY_MIB, help="Largest request body in MiB, up to 1024 (413 beyond).")] = 8,
    cors: Annotated[Optional[str], typer.Option("--cors", help="Web pages (origins, comma-separated, or '*' for any) whose scripts may call the API from a browser, beside pages served from this machine (localhost, 127.0.0.1, [::1]), which always may.")] = None,
    chat_template_file: Annotated[Optional[str], typer.Option("--chat-template-file", help="A Jinja chat template to use instead of the model's (llama-server's flag): e.g. one that renders tools for a model whose own does not.")] = None,
    max_tokens: Annotated[Optional[int], number(limits.MAX_TOKENS, "--max-tokens", "-n", help="The most tokens an answer may have when its request sets no limit (llama-server's -n), on every route; a request's own max_tokens (max_output_tokens) wins. Default: none, an answer may run to the end of the context.")] = None,
    temperature: Annotated[Optional[float], number(limits.TEMPERATURE, "--temperature", "--temp", help="The sampling temperature of a request that sets none (llama-server's --temp; Codex CLI, for one, sends none); a request's own wins. Default: the API's own, 1.0 (0 = greedy).")] = None,
    top_k: Annotated[Optional[int], number(limits.TOP_K, help="Top-k for a request that sets none (llama-server's --top-k); a request's own wins. Default: off.")] = None,
    top_p: Annotated[Optional[float], number(limits.TOP_P, help="Top-p for a request that sets none (llama-server's --top-p); a request's own wins. Default: the API's own, 1.0.")] = None,
    store_responses: Annotated[int, number(limits.STORE_RESPONSES, help="Responses API answers kept for previous_response_id and GET /v1/responses/{id}, per API key, least recently used dropped first (0: store none).")] = 256,
    store_mib: Annotated[int, number(limits.STORE_MIB, help="MiB the stored responses may take (counted as their JSON).")] = 64,
    reasoning_format: Annotated[str, typer.Option("--reasoning-format", help="How thinking (<think>...</think>, gpt-oss's analysis) is returned: deepseek (in message.reasoning_content), deepseek-legacy (there and in content), none (left in content), auto (= deepseek). A request's reasoning_format overrides it.")] = "auto",
    ctx: CtxOpt = DEFAULT_CTX,
    draft_depth: DepthOpt = None,
    draft_topk: TopkOpt = None,
    draft_tokens: NodesOpt = None,
    device: DeviceOpt = None,
    threads: ThreadsOpt = None,
    exact: ExactOpt = False,
    guard: GuardOpt = True,
    adapt: AdaptOpt = False,
    window: WindowOpt = None,
    draft_dtype: DraftDtypeOpt = "q8_0",
) -> None:
    """Serve the model over an OpenAI-compatible API: point any OpenAI client at the printed URL.

    Routes: POST /v1/chat/completions, /v1/completions, /v1/responses (GET, DELETE /v1/responses/{id}),
    /v1/messages (Anthropic's), /v1/messages/count_tokens, /tokenize, /detokenize; GET /v1/models, /props,
    /slots, /health, /metrics.
    Ctrl-C or SIGTERM stops taking requests and lets running answers finish (up to 10 s).
    """
    if api_key is not None and not api_key.strip():
        raise UsageError("--api-key is empty", hint="pass a key (any secret string), or leave --api-key out")
    origins = cors_origins(cors)
    if reasoning_format not in REASONING_FORMATS:
        raise UsageError(f"--reasoning-format {reasoning_format!r} is not one of {', '.join(REASONING_FORMATS)}",
                         hint="use --reasoning-format auto (thinking in reasoning_content) or none")
    opts = RunArgs(model=model, draft=draft, method=method, backend=backend, ctx=ctx, draft_depth=draft_depth,
                   draft_topk=draft_topk, draft_tokens=draft_tokens, device=device, threads=threads, exact=exact,
                   window=window, draft_dtype=draft_dtype, guard=guard, adapt=adapt).options()
    serving = lazy.Serving(host=host, port=port, api_key=api_key, alias=alias, parallel=parallel, queue=queue,
                           cache_prompt=cache_prompt, cache_ram=cache_ram << 20, max_body=max_body_mib << 20,
                           cors=origins, reasoning_format=reasoning_format,
                           template_file=Path(chat_template_file) if chat_template_file is not None else None,
                           max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                           store_responses=store_responses, store_bytes=store_mib << 20)
    lazy.launch(opts, serving)


def cors_origins(value: str | None) -> tuple[str, ...]:
    """--cors: origins as a browser sends them (scheme://host[:port]), or '*'."""
    if value is None:
        return ()
    origins = tuple(o.strip().rstrip("/") for o in value.split(",") if o.strip())
    for o in origins:
        if o != "*" and ("://" not in o or o.count("/") != 2):
            raise UsageError(f"--cors {o!r} is not an origin",
                             hint="give scheme://host[:port], e.g. --cors https://chat.example.org, or '*' for any")
    if not origins:
        raise UsageError("--cors is empty", hint="name an origin (scheme://host[:port]) or '*', or leave --cors out")
    return origins

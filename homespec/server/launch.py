"""`homespec serve` from its parsed options to a running server: the policy the command used to
hold. Speculate even without a shipped head (prompt lookup instead: homespec.engine.options), check
everything before the port is bound, bind before the model loads (a port in use fails at once),
choose the lanes inside the one plan when --parallel is left out (homespec.engine.setup), load, serve
until a signal or until the engine stops."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from homespec.engine.core import Engine
from homespec.errors import HomespecError
from homespec.server.answers import Defaults
from homespec.server.app import create_app
from homespec.server.chat import chat_settings, checked_template
from homespec.server.run import bind, exposure_warning, log_to_stderr, serve as serve_app, url_of
from homespec.server.store import ResponseStore
from homespec.speculative.methods import method_entry
from homespec.engine.options import RunOptions, lookup_without_head
from homespec.engine.setup import set_up
from homespec.termline import stage

if TYPE_CHECKING:
    import socket


@dataclass(frozen=True, slots=True, kw_only=True)
class Serving:
    """serve's own options, checked by the command (RunOptions holds the shared ones)."""

    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    alias: str | None = None  # the model's id; None: the model file's name
    parallel: int | None = None  # None: the most lanes the plan fits as well as one (up to 4)
    queue: int = 32
    cache_prompt: bool = True
    cache_ram: int = 0  # bytes of host RAM for idle conversations' states
    max_body: int = 8 << 20  # bytes
    cors: tuple[str, ...] = ()
    template_file: Path | None = None
    reasoning_format: str = "auto"
    max_tokens: int | None = None  # an answer's limit when its request sets none (None: the context's end)
    temperature: float | None = None  # the sampling of a request that sets none (None: the API's own defaults)
    top_k: int | None = None
    top_p: float | None = None
    store_responses: int = 256  # Responses API answers kept (homespec.server.store)
    store_bytes: int = 64 << 20


def launch(opts: RunOptions, s: Serving) -> None:
    """Open the engine `opts` describe with `s.parallel` lanes and serve it on s.host:s.port."""
    engine, sock, path = open_engine(opts, s)
    serve_engine(engine, sock, host=s.host, api_key=s.api_key, name=s.alias or os.path.basename(path),
                 max_body=s.max_body, cors=s.cors, template_file=s.template_file,
                 reasoning_format=s.reasoning_format,
                 defaults=Defaults(s.max_tokens, s.temperature, s.top_k, s.top_p),
                 store=(s.store_responses, s.store_bytes))


def open_engine(opts: RunOptions, s: Serving) -> tuple["Engine", "socket.socket", str]:
    """Check and plan once (the lanes chosen inside the plan when --parallel is left out), bind, load
    and start the engine: -> (engine, socket, model path)."""
    setup = set_up(lookup_without_head(opts), parallel=s.parallel)  # refused before anything binds or loads
    if s.template_file is not None:
        checked_template(s.template_file)
    sock = bind(s.host, s.port)  # a port in use fails here, before the model loads
    try:
        opts, path = setup.options, setup.model_path
        how = opts.method if not method_entry(opts.method).speculative else \
            f"{opts.method}, {'guarded' if opts.guard else 'unguarded'}"
        with stage(sys.stderr, f"loading {os.path.basename(path)} ({how}, on {opts.backend}, {setup.parallel} parallel)"):
            engine = Engine.from_setup(setup, queue_size=s.queue, cache_prompt=s.cache_prompt,
                                       cache_ram=s.cache_ram).start()
    except BaseException:
        sock.close()
        raise
    return engine, sock, path


def serve_engine(engine, sock, *, host: str, api_key: str | None, name: str, max_body: int,
                 cors: tuple[str, ...] = (), template_file: Path | None = None, reasoning_format: str = "auto",
                 defaults: Defaults = Defaults(), store: tuple[int, int] = (256, 64 << 20)) -> None:
    """Serve until a signal, or until the engine stops: then exit 1 (after /health has said why for
    a moment), for whatever supervises the server (systemd, a container) to restart it."""
    log_to_stderr()
    try:
        chat = chat_settings(engine.tokenizer, template_file, reasoning_format)
        web = create_app(engine, model_name=name, api_key=api_key, max_body=max_body, cors=cors, chat=chat,
                         defaults=defaults, store=ResponseStore(*store, keyed=bool(api_key)))
        if (warning := exposure_warning(host, api_key)) is not None:
            print(warning, file=sys.stderr)
        print(f"serving {name} at {url_of(sock)} (OpenAI API: base_url={url_of(sock)}, "
              f"api_key={_key_shown(api_key)}; {engine.slots} parallel, "
              f"{engine.lane_ctx} tokens each, {_limit_shown(defaults)}); Ctrl-C stops", flush=True)
        caught = serve_app(web, sock, stop_when=lambda: engine.failure, stop_taking=engine.stop_taking,
                           end_all=engine.cancel_all)
        if caught and engine.failure is None:
            print(f"homespec serve: {caught}: stopped; every answer ended; closing", file=sys.stderr)
    finally:
        engine.close(timeout_s=5.0)
    if engine.failure is not None:
        raise HomespecError(f"the engine stopped: {engine.failure}",
                            hint="the server's log above has the traceback; restart homespec serve")


def _key_shown(api_key: str | None) -> str:
    """What the start line says of the key: never the key itself (stdout ends up in logs)."""
    if not api_key:
        return "any"
    return "<your $HOMESPEC_API_KEY>" if os.environ.get("HOMESPEC_API_KEY") == api_key else "<your --api-key>"


def _limit_shown(defaults: Defaults) -> str:
    """What the start line says of --max-tokens and the sampling flags."""
    if defaults.max_tokens is None:
        out = "answers up to the context's end unless a request sets max_tokens"
    else:
        out = f"answers up to {defaults.max_tokens} tokens unless a request sets max_tokens"
    given = [f"{k} {v}" for k, v in (("temperature", defaults.temperature), ("top_k", defaults.top_k),
                                      ("top_p", defaults.top_p)) if v is not None]
    return out + (f", sampled with {', '.join(given)} unless a request says" if given else "")

"""What the commands call beyond the CLI, imported on first use: one table instead of an import in
every command function.

`homespec` imports every command module to build its parser, so a command module that imported
its library at the top would make `homespec plan` (and `--help`) load the engine, llama.cpp's
bindings and numpy. A command reads what it runs from here instead, as `lazy.make_plan(...)`: each
use imports the module named in the table (a dictionary lookup once it is loaded) and returns the
attribute, so a value replaced on its module is what the next use gets, as with an import in the
function. The TYPE_CHECKING block names the same objects, for readers, type checkers and the import
contracts (lint-imports reads it); tests/cli/test_cli_lazy.py checks that the two agree.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from homespec.atomic import write_bytes
    from homespec.backends.llamacpp.amx import build_report
    from homespec.bench.llamaserver import against as against_llama_server
    from homespec.bench.llamaserver import as_json as llama_server_json
    from homespec.bench.llamaserver import find_server as find_llama_server
    from homespec.bench.llamaserver import table as llama_server_table
    from homespec.bench.report import markdown as bench_markdown
    from homespec.bench.report import plot as bench_plot
    from homespec.bench.report import render as render_bench
    from homespec.bench.run import run_bench
    from homespec.bench.run import summary as bench_summary
    from homespec.chat.app import Chat, repl
    from homespec.chat.store import ChatFile
    from homespec.chat.store import find as find_chat
    from homespec.chat.store import load as load_chat
    from homespec.cli.listing import VERDICT_WORDS, list_heads, list_models
    from homespec.engine.options import RunOptions, check_options, draft_shape, lookup_without_head
    from homespec.engine.setup import set_up
    from homespec.hardware.isa import cpu_flags, cpu_isa
    from homespec.hardware.probe import probe as run_probe
    from homespec.hardware.probe import probe_json
    from homespec.hardware.render import render_cpu_build, render_machine
    from homespec.heads.export import check_args as check_export_args
    from homespec.heads.export import export_head
    from homespec.longprompts import long_prompts
    from homespec.plan.api import PlanRequest, make_plan
    from homespec.plan.emit import emit as emit_command
    from homespec.plan.render import render as render_plan
    from homespec.plan.render import to_json as plan_json
    from homespec.promptsets import load_prompts, read_prompts_file
    from homespec.server.launch import Serving, launch
    from homespec.session import Finish, Session, TextDelta, final
    from homespec.session.encode import checked_prompts, prompt_tokens
    from homespec.sources.pull import pull
    from homespec.sources.stores import cache_dir, lmstudio_roots, ollama_roots
    from homespec.speculative.sampling import Sampler
    from homespec.speculative.steps import Limits
    from homespec.termline import stage
    from homespec.train.progress import RichProgress
    from homespec.userfiles import writable, write_error

# name here -> (module, attribute there)
TABLE: dict[str, tuple[str, str]] = {
    "write_bytes": ("homespec.atomic", "write_bytes"),
    "build_report": ("homespec.backends.llamacpp.amx", "build_report"),
    "against_llama_server": ("homespec.bench.llamaserver", "against"),
    "llama_server_json": ("homespec.bench.llamaserver", "as_json"),
    "find_llama_server": ("homespec.bench.llamaserver", "find_server"),
    "llama_server_table": ("homespec.bench.llamaserver", "table"),
    "bench_markdown": ("homespec.bench.report", "markdown"),
    "bench_plot": ("homespec.bench.report", "plot"),
    "render_bench": ("homespec.bench.report", "render"),
    "run_bench": ("homespec.bench.run", "run_bench"),
    "bench_summary": ("homespec.bench.run", "summary"),
    "Chat": ("homespec.chat.app", "Chat"),
    "repl": ("homespec.chat.app", "repl"),
    "ChatFile": ("homespec.chat.store", "ChatFile"),
    "find_chat": ("homespec.chat.store", "find"),
    "load_chat": ("homespec.chat.store", "load"),
    "VERDICT_WORDS": ("homespec.cli.listing", "VERDICT_WORDS"),
    "list_heads": ("homespec.cli.listing", "list_heads"),
    "list_models": ("homespec.cli.listing", "list_models"),
    "RunOptions": ("homespec.engine.options", "RunOptions"),
    "check_options": ("homespec.engine.options", "check_options"),
    "draft_shape": ("homespec.engine.options", "draft_shape"),
    "lookup_without_head": ("homespec.engine.options", "lookup_without_head"),
    "set_up": ("homespec.engine.setup", "set_up"),
    "cpu_flags": ("homespec.hardware.isa", "cpu_flags"),
    "cpu_isa": ("homespec.hardware.isa", "cpu_isa"),
    "run_probe": ("homespec.hardware.probe", "probe"),
    "probe_json": ("homespec.hardware.probe", "probe_json"),
    "render_cpu_build": ("homespec.hardware.render", "render_cpu_build"),
    "render_machine": ("homespec.hardware.render", "render_machine"),
    "check_export_args": ("homespec.heads.export", "check_args"),
    "export_head": ("homespec.heads.export", "export_head"),
    "long_prompts": ("homespec.longprompts", "long_prompts"),
    "PlanRequest": ("homespec.plan.api", "PlanRequest"),
    "make_plan": ("homespec.plan.api", "make_plan"),
    "emit_command": ("homespec.plan.emit", "emit"),
    "render_plan": ("homespec.plan.render", "render"),
    "plan_json": ("homespec.plan.render", "to_json"),
    "load_prompts": ("homespec.promptsets", "load_prompts"),
    "read_prompts_file": ("homespec.promptsets", "read_prompts_file"),
    "Serving": ("homespec.server.launch", "Serving"),
    "launch": ("homespec.server.launch", "launch"),
    "Finish": ("homespec.session", "Finish"),
    "Session": ("homespec.session", "Session"),
    "TextDelta": ("homespec.session", "TextDelta"),
    "final": ("homespec.session", "final"),
    "checked_prompts": ("homespec.session.encode", "checked_prompts"),
    "prompt_tokens": ("homespec.session.encode", "prompt_tokens"),
    "pull": ("homespec.sources.pull", "pull"),
    "cache_dir": ("homespec.sources.stores", "cache_dir"),
    "lmstudio_roots": ("homespec.sources.stores", "lmstudio_roots"),
    "ollama_roots": ("homespec.sources.stores", "ollama_roots"),
    "Sampler": ("homespec.speculative.sampling", "Sampler"),
    "Limits": ("homespec.speculative.steps", "Limits"),
    "stage": ("homespec.termline", "stage"),
    "RichProgress": ("homespec.train.progress", "RichProgress"),
    "writable": ("homespec.userfiles", "writable"),
    "write_error": ("homespec.userfiles", "write_error"),
}


def __getattr__(name: str) -> Any:
    """`lazy.NAME`: the object TABLE names, its module imported now if it was not before."""
    try:
        module, attribute = TABLE[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    # __import__, the import statement's own path (importlib.import_module bypasses it): `python -X
    # importtime -m homespec CMD` then lists the modules a command loads through this table
    __import__(module)
    return getattr(sys.modules[module], attribute)

"""The `homespec` command. Each command parses, calls one library function, and renders.

Results go to stdout (rich tables or --json); progress and diagnostics to stderr.
Exit codes: 0 ok, 1 runtime error, 2 usage error, 3 plan does not fit. HOMESPEC_DEBUG=1 shows tracebacks.

One module per command; each registers itself on `app` when imported, and the imports below run
in the order `homespec --help` lists the commands. What a command runs (the planner, the engine,
the server) it reads from homespec.cli.lazy, which imports each module on first use, so `homespec
plan` loads neither the engine nor torch, llama_cpp or numpy.
"""

from __future__ import annotations

from homespec.cli.app import app, draft_app
from homespec.cli.options import RunArgs
from homespec.cli import probe as _probe  # noqa: F401 - registers `probe`
from homespec.cli import plan as _plan  # noqa: F401 - registers `plan`
from homespec.cli import generate as _generate  # noqa: F401 - registers `generate`
from homespec.cli import bench as _bench  # noqa: F401 - registers `bench`
from homespec.cli import chat as _chat  # noqa: F401 - registers `chat`
from homespec.cli import serve as _serve  # noqa: F401 - registers `serve`
from homespec.cli import train as _train  # noqa: F401 - registers `draft train`
from homespec.cli import models as _models  # noqa: F401 - registers `models`
from homespec.cli import pull as _pull  # noqa: F401 - registers `pull`
from homespec.cli import export as _export  # noqa: F401 - registers `draft export`
from homespec.cli.bench import _BenchCommand, _check_output_file, _legacy_json_file, _long_token_prompts
from homespec.cli.chat import _ResumeCommand
from homespec.cli.errors import _click_exceptions, _command_path, _entry, _one_line, main

__all__ = [
    "app", "draft_app", "main", "_entry", "RunArgs", "_BenchCommand", "_legacy_json_file", "_check_output_file",
    "_long_token_prompts", "_ResumeCommand", "_click_exceptions", "_command_path", "_one_line",
]

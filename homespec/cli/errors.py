"""main(): known exceptions become `error:` + `hint:` on stderr and an exit code."""

from __future__ import annotations

import os
import sys

import typer

from homespec import interrupt
from homespec.cli.app import app
from homespec.cli.options import OutOfRange
from homespec.errors import EXIT_RUNTIME, EXIT_USAGE, HomespecError


def _click_exceptions():
    """The parser's exception classes (typer 0.29 carries its own copy of click)."""
    try:
        from typer._click import exceptions
    except ImportError:  # older typer: click itself
        from click import exceptions
    return exceptions


def _command_path(e, argv: list[str] | None) -> str:
    """The command a parser error is about. An option missing its value at the end of the line is
    raised in the root's context, so the subcommand names on the line are followed instead."""
    if e.ctx is not None and not hasattr(e.ctx.command, "commands"):
        return e.ctx.command_path
    words, command = [app.info.name], typer.main.get_command(app)
    for arg in sys.argv[1:] if argv is None else argv:
        sub = getattr(command, "commands", {}).get(arg)
        if sub is None:
            break
        words.append(arg)
        command = sub
    return " ".join(words)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> int:
    """Entry point: turn known errors into two lines on stderr and an exit code."""
    interrupt.install()
    try:
        code = _run(argv)
        _finalise()
    finally:
        interrupt.uninstall()
    if code == 0 and interrupt.swallowed():  # a Ctrl-C while the models were torn down
        code = interrupt.EXIT_INTERRUPTED
    if code == interrupt.EXIT_INTERRUPTED and interrupt.seen():  # typer turns a Ctrl-C into a plain exit 130
        print(interrupt.message(), file=sys.stderr)
    return code


def _finalise() -> None:
    """Tear down what the command left to the garbage collector (llama.cpp models and their
    contexts) while a Ctrl-C is still noted, not during the interpreter's exit."""
    import gc

    try:
        gc.collect()
    except KeyboardInterrupt:
        interrupt.note()
        interrupt.swallow()


def _run(argv: list[str] | None) -> int:
    click = _click_exceptions()
    try:
        code = app(args=argv, prog_name=app.info.name, standalone_mode=False)
        return code if isinstance(code, int) else 0
    except SystemExit as e:  # a command that exits with its own code
        return int(e.code or 0) if not isinstance(e.code, str) else 1
    except click.NoArgsIsHelpError as e:  # `homespec` or `homespec draft` alone: the help
        if e.format_message().strip():  # rich help has printed itself already
            print(e.format_message(), file=sys.stderr)
        return EXIT_USAGE
    except OutOfRange as e:  # a number outside its range (homespec.limits)
        flag = e.param.opts[0] if e.param is not None and e.param.opts else ""
        print(f"error: {flag} {_one_line(e.message)}".strip(), file=sys.stderr)
        print(f"hint: {e.hint}", file=sys.stderr)
        return EXIT_USAGE
    except click.UsageError as e:  # a bad flag or value, caught by the parser
        print(f"error: {_one_line(e.format_message())}", file=sys.stderr)
        print(f"hint: see `{_command_path(e, argv)} --help`", file=sys.stderr)
        return EXIT_USAGE
    except typer.Abort:  # Ctrl-C or end of input inside a prompt
        interrupt.note()
        return interrupt.EXIT_INTERRUPTED
    except click.ClickException as e:
        print(f"error: {_one_line(e.format_message())}", file=sys.stderr)
        return e.exit_code
    except HomespecError as e:
        if os.environ.get("HOMESPEC_DEBUG"):
            raise
        print(f"error: {e.message}", file=sys.stderr)
        if e.hint:
            print(f"hint: {e.hint}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:  # outside a command (while the parser runs)
        interrupt.note()
        return interrupt.EXIT_INTERRUPTED
    except Exception as e:  # noqa: BLE001 - the last line of defence against tracebacks
        if os.environ.get("HOMESPEC_DEBUG"):
            raise
        print(f"error: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        print("hint: rerun with HOMESPEC_DEBUG=1 for a traceback, and report it", file=sys.stderr)
        return EXIT_RUNTIME


def _entry() -> None:  # pragma: no cover
    code = main()
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the run is over: a late Ctrl-C must not print a traceback
    sys.exit(code)

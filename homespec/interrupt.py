"""Ctrl-C outside a prompt: one line on stderr, exit 130, and what was kept.

Typer turns a KeyboardInterrupt raised inside a command into exit code 130 (typer/core.py), so the
entry point (homespec.cli.errors.main) never sees the exception. install() puts a SIGINT handler in
front of Python's own that notes the interrupt and raises KeyboardInterrupt as before, so code that
catches it (chat ends an answer on Ctrl-C) behaves the same; main() then prints message().

Code that would leave something behind when interrupted wraps that step in keeping(): the line then
names it (a partial download is kept and resumes on the next run).
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a Ctrl-C

_seen: list[bool] = [False]
_kept: list[str] = []


def _on_sigint(signum, frame) -> None:
    _seen[0] = True
    signal.default_int_handler(signum, frame)


_swallowed: list[bool] = [False]  # a Ctrl-C raised inside a finaliser, which Python only prints
_previous_hook: list[Callable] = []


def _unraisable(u) -> None:
    """A KeyboardInterrupt raised in a finaliser (llama-cpp-python's Llama.__del__ while a model is
    torn down) cannot propagate: Python prints a traceback and goes on, and the command would exit 0.
    Note it instead; main() then reports the interrupt."""
    if isinstance(u.exc_value, KeyboardInterrupt):
        _seen[0] = _swallowed[0] = True
        return
    (_previous_hook[0] if _previous_hook else sys.__unraisablehook__)(u)


def install() -> None:
    """Note SIGINTs from now on (main thread only; a handler someone else installed is left alone)."""
    _seen[0] = _swallowed[0] = False
    _kept.clear()
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)
    if sys.unraisablehook is not _unraisable:
        _previous_hook[:] = [sys.unraisablehook]
        sys.unraisablehook = _unraisable


def uninstall() -> None:
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is _on_sigint:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if sys.unraisablehook is _unraisable:
        sys.unraisablehook = _previous_hook[0] if _previous_hook else sys.__unraisablehook__


def swallow() -> None:
    """A Ctrl-C that reached no command (it came while the models were torn down)."""
    _seen[0] = _swallowed[0] = True


def swallowed() -> bool:
    """Whether a Ctrl-C was raised inside a finaliser since install() (and so never reached a command)."""
    return _swallowed[0]


def note() -> None:
    """An interrupt reached the entry point by another way (a prompt's Abort, the parser)."""
    _seen[0] = True


def seen() -> bool:
    """Whether a SIGINT came since install()."""
    return _seen[0]


@contextmanager
def keeping(what: str | Callable[[], str | None]) -> Iterator[None]:
    """An interrupt inside this block leaves `what` behind ("the partial download ... resumes ..."); a
    callable is asked when the interrupt comes (None: nothing was left)."""
    try:
        yield
    except KeyboardInterrupt:
        kept = what() if callable(what) else what
        if kept:
            _kept.append(kept)
        raise


def message() -> str:
    """The one line an interrupt prints."""
    return "error: interrupted" + "".join(f"; {k}" for k in dict.fromkeys(_kept))

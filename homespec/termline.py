"""Two kinds of line on a terminal: a stage line while something slow runs, and a status line
kept just below text that is still streaming.

The status line uses VT100 conventions every terminal emulator and tmux follow: IND (ESC D) and
RI (ESC M) move the cursor down and up a row keeping its column (IND scrolls at the bottom), and
DECSC / DECRC (ESC 7 / ESC 8) save and restore it. The text's own column is never computed, so
wide characters and wrapping are the terminal's business. Where the stream is not a terminal, or
TERM=dumb, nothing is drawn and no escape code is written.
"""

from __future__ import annotations

import os
import shutil
import time
from contextlib import contextmanager
from typing import Iterator, TextIO

_ENSURE_ROW = "\x1bD\x1bM"  # a row below the cursor exists (scrolls once at the bottom), same column
_TO_ROW_BELOW = "\x1b7\x1bD\r\x1b[2K"  # save the cursor, go to the row below, clear it
_BACK = "\x1b8"  # restore the cursor
DIM, RESET = "\x1b[2m", "\x1b[0m"


def is_terminal(stream: TextIO) -> bool:
    """A terminal that understands cursor movement."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"


class StatusLine:
    """A line of figures one row below the cursor, redrawn as text streams above it."""

    def __init__(self, out: TextIO):
        self.out = out
        self.live = is_terminal(out)
        self.shown = False

    def write(self, text: str, status: str | None) -> None:
        """Write streamed `text`, then (on a terminal) the status below it, in one write."""
        self.out.write(self._clear() + text + (self._draw(status) if status is not None else ""))
        self.out.flush()

    def clear(self) -> None:
        if self.shown:
            self.out.write(self._clear())
            self.out.flush()

    def _clear(self) -> str:
        if not self.shown:
            return ""
        self.shown = False
        return _TO_ROW_BELOW + _BACK

    def _draw(self, status: str) -> str:
        if not self.live:
            return ""
        self.shown = True
        width = _columns(self.out) - 1  # never wrap: it would move the text
        return _ENSURE_ROW + _TO_ROW_BELOW + DIM + status[:width] + RESET + _BACK


def _columns(stream: TextIO) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # no descriptor (io.UnsupportedOperation is an OSError)
        columns = 0
    return columns if columns > 0 else shutil.get_terminal_size((80, 24)).columns  # a pty may report 0


@contextmanager
def stage(err: TextIO, what: str) -> Iterator[None]:
    """`what …` on stderr while the block runs, completed with its time: a wait says what it is."""
    live = is_terminal(err)
    err.write(f"{what} …" + ("" if live else "\n"))
    err.flush()
    t0 = time.perf_counter()
    ok = False
    try:
        yield
        ok = True
    finally:
        took = time.perf_counter() - t0
        if live:  # complete the line in place
            err.write(f"\r{what} … {took:.1f} s\n" if ok else "\n")
        elif ok:
            err.write(f"{what}: {took:.1f} s\n")
        err.flush()

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
import unicodedata
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
    """A line of figures one row below the cursor, redrawn as text streams above it.

    The text is assumed to start at column 0. Its column is followed (character widths as the
    terminal counts them) for one case only: text that ends exactly at the right margin leaves
    the terminal's wrap pending, and any cursor movement cancels that (the next character would
    overwrite the last one), so the status is not drawn until the text moves on."""

    def __init__(self, out: TextIO):
        self.out = out
        self.live = is_terminal(out)
        self.shown = False
        self.col = 0  # the text's column; == the width when a wrap is pending

    def write(self, text: str, status: str | None) -> None:
        """Write streamed `text`, then (on a terminal) the status below it, in one write."""
        columns = _columns(self.out) if self.live else 0
        self.col = _advance(self.col, text, columns)
        draw = status is not None and self.live and self.col < columns
        self.out.write(self._clear() + text + (self._draw(status, columns) if draw else ""))
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

    def _draw(self, status: str, columns: int) -> str:
        self.shown = True
        # cut to the width less one: a status that wraps would move the text
        return _ENSURE_ROW + _TO_ROW_BELOW + DIM + status[: columns - 1] + RESET + _BACK


def _advance(col: int, text: str, columns: int) -> int:
    """The column after writing `text` from `col` on a terminal `columns` wide (xterm's rules:
    a character that does not fit wraps first; a wide one takes two cells)."""
    if columns <= 0:
        return 0
    for ch in text:
        if ch in "\r\n":
            col = 0
        elif ch == "\t":
            col = min(columns - 1, (col // 8 + 1) * 8) if col < columns else 8
        else:
            w = _cells(ch)
            if w and col + w > columns:
                col = 0
            col += w
    return col


def _cells(ch: str) -> int:
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf", "Cc"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _columns(stream: TextIO) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):  # no descriptor (io.UnsupportedOperation is an OSError)
        columns = 0
    return columns if columns > 0 else shutil.get_terminal_size((80, 24)).columns  # a pty may report 0


@contextmanager
def quiet_input(stdin: TextIO | None) -> Iterator[None]:
    """Keys typed while the block runs are not echoed (they wait, unseen, for the next prompt): an
    echo would land in the streaming text and push the status line out of place. Ctrl-C still
    works (ISIG does not depend on ECHO). Not a terminal: nothing changes."""
    try:
        import termios

        fd = stdin.fileno()  # type: ignore[union-attr]
        saved = termios.tcgetattr(fd)
    except Exception:  # noqa: BLE001 - no stdin, not a terminal, or no termios (Windows)
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO  # lflag
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSANOW, saved)


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

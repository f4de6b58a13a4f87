"""The stage line and the status line, written to a real pseudo-terminal and to a plain stream."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import termios

import pytest

from homespec.termline import StatusLine, quiet_input, stage


@pytest.fixture
def terminal(monkeypatch):
    """A writer on a pty's slave end (40 columns) and a reader of what reaches the master."""
    monkeypatch.setenv("TERM", "xterm-256color")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
    out = os.fdopen(slave, "w", encoding="utf-8")

    def read() -> bytes:
        out.flush()
        buf = b""
        while True:
            try:
                os.set_blocking(master, False)
                chunk = os.read(master, 65536)
            except BlockingIOError:
                return buf
            buf += chunk

    yield out, read
    out.close()
    os.close(master)


def test_status_stays_one_row_below_the_text_and_goes_away(terminal):
    out, read = terminal
    line = StatusLine(out)
    line.write("Hello", "12.0 tok/s · " + "x" * 60)
    first = read()
    assert first.startswith(b"Hello")
    # a row below exists (IND then RI keep the column), then save, go down, clear, draw, restore
    assert b"\x1bD\x1bM\x1b7\x1bD\r\x1b[2K" in first and first.endswith(b"\x1b8")
    drawn = first.split(b"\x1b[2m")[1].split(b"\x1b[0m")[0].decode()
    assert drawn.startswith("12.0 tok/s") and len(drawn) == 39  # cut to the width: it never wraps
    line.write(", world", "13.0 tok/s")
    second = read()
    assert second.startswith(b"\x1b7\x1bD\r\x1b[2K\x1b8, world")  # the old status cleared before the text
    line.clear()
    assert read() == b"\x1b7\x1bD\r\x1b[2K\x1b8"
    line.clear()
    assert read() == b""  # nothing left to clear


@pytest.mark.parametrize("text", ["x" * 40, "界" * 20, "ab\n" + "é" * 40, "x" * 39 + "e\u0301"])
def test_no_draw_while_a_wrap_is_pending(terminal, text):
    """Text ending at the right margin (40 columns) leaves the wrap pending; moving the cursor then
    would make the next character overwrite the last, so the status waits for more text."""
    out, read = terminal
    line = StatusLine(out)
    line.write(text, "12.0 tok/s")
    assert read() == text.replace("\n", "\r\n").encode()  # no cursor movement at all
    line.write("y", "12.0 tok/s")
    assert read().startswith(b"y\x1bD\x1bM")  # the wrap happened: the status is back


@pytest.mark.parametrize("term", ["dumb", "xterm-256color"])
def test_no_escape_codes_where_they_would_not_work(monkeypatch, term, terminal):
    out, read = terminal
    monkeypatch.setenv("TERM", term)
    plain = io.StringIO()  # not a terminal, whatever TERM says
    for stream in ([plain, out] if term == "dumb" else [plain]):
        s = StatusLine(stream)
        s.write("text", "12.0 tok/s")
        s.clear()
    assert plain.getvalue() == "text"
    if term == "dumb":
        assert read() == b"text"


def test_stage_says_what_runs_and_how_long(terminal):
    plain = io.StringIO()
    with stage(plain, "loading the model"):
        pass
    lines = plain.getvalue().splitlines()
    assert lines[0] == "loading the model …" and lines[1].startswith("loading the model: ") and lines[1].endswith(" s")
    out, read = terminal
    with stage(out, "timing steps"):
        assert read() == "timing steps …".encode()  # shown while the block runs
    assert read().startswith("\rtiming steps … ".encode())  # completed in place
    with pytest.raises(KeyError):
        with stage(plain, "failing"):
            raise KeyError("x")
    assert plain.getvalue().endswith("failing …\n")  # no time claimed for a stage that failed


def test_quiet_input_stops_the_echo_and_gives_it_back(terminal):
    import termios


    out, _ = terminal
    echo = lambda: bool(termios.tcgetattr(out.fileno())[3] & termios.ECHO)  # noqa: E731
    assert echo()
    with pytest.raises(RuntimeError):
        with quiet_input(out):
            assert not echo()  # typed keys do not land in the streaming text
            assert termios.tcgetattr(out.fileno())[3] & termios.ISIG  # Ctrl-C still interrupts
            raise RuntimeError
    assert echo()
    with quiet_input(io.StringIO()):  # not a terminal: nothing to do
        pass
    with quiet_input(None):
        pass

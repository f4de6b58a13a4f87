"""`homespec chat` on the real SmolLM2 file: multi-turn, commands, context overflow, saving and
resuming, Ctrl-C and the live readout in a pseudo-terminal."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from homespec.chat import Chat, repl
from homespec.runner import RunOptions, open_session

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def chats_dir(tmp_path, monkeypatch):
    """Chats (and the chat subprocesses, which inherit the environment) save into a tmp folder."""
    folder = tmp_path / "chats"
    monkeypatch.setenv("HOMESPEC_CHATS_DIR", str(folder))
    return folder


class TTYless(io.StringIO):
    def isatty(self) -> bool:
        return False


@pytest.fixture(scope="module")
def session():
    s = open_session(RunOptions(method="ngram", ctx=384))
    yield s
    s.close()


def test_multi_turn_commands_and_save(session, tmp_path):
    out, err = TTYless(), TTYless()
    chat = Chat(session, max_tokens=24, out=out, err=err)
    lines = iter(["Name a fruit.", "/stats", "And a vegetable?", f"/save {tmp_path / 'c.json'}", "/reset", "/stats", "/quit"])
    repl(chat, read=lambda _: next(lines))
    saved = json.loads((tmp_path / "c.json").read_text())
    assert [m["role"] for m in saved["messages"]] == ["user", "assistant", "user", "assistant"]
    assert saved["messages"][1]["content"].strip()
    assert "tok/s" in out.getvalue() and "tokens/pass" in out.getvalue()
    assert "conversation cleared" in err.getvalue()
    assert chat.history == []


def test_context_overflow_drops_oldest_turns_and_never_crashes(session):
    out, err = TTYless(), TTYless()
    chat = Chat(session, max_tokens=48, out=out, err=err)
    filler = "Tell me about rivers, lakes, seas and oceans in some detail please. " * 9
    for _ in range(3):
        chat.ask(filler)
    assert "context full" in err.getvalue()
    assert session.backend.n_past <= session.backend.max_context
    lines = iter(["word " * 600, "/quit"])  # one message larger than the whole context
    repl(chat, read=lambda _: next(lines))
    assert "error:" in err.getvalue() and "--ctx" in err.getvalue()


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    buf = b""
    end = time.time() + timeout
    while time.time() < end and needle not in buf:
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    return buf


LONG_ANSWER = b"Count from 1 to 1000, writing each number as a word on its own line.\n"


def _until_streaming(fd: int) -> None:
    """Return once the answer itself has started to stream (our echoed line excluded)."""
    _read_until(fd, b"own line", 60)  # our own line echoed
    seen = b""
    end = time.time() + 120
    while time.time() < end and len(seen) < 60:
        seen += _read_until(fd, b"\x00never", 0.5)


def _wait_draining(proc: subprocess.Popen, fd: int, timeout: float) -> tuple[int | None, bytes]:
    """Wait for the chat to exit while reading its terminal: a child writing into a full pty blocks."""
    buf = b""
    end = time.time() + timeout
    while time.time() < end and proc.poll() is None:
        buf += _read_until(fd, b"\x00never", 0.5)
    return proc.poll(), buf


def _child_setup() -> None:
    """The pty becomes the chat's terminal, and Ctrl-C gets its default action back: a test run
    started in the background by a shell inherits SIGINT ignored, and so would the chat."""
    import fcntl
    import signal
    import termios

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _spawn_chat() -> tuple[subprocess.Popen, int]:
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="120", TERM="dumb")
    proc = subprocess.Popen([sys.executable, "-m", "homespec", "chat", "--method", "none", "-n", "1500", "--ctx", "2048"],
                            stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
                            preexec_fn=_child_setup)
    os.close(slave)
    return proc, master


def test_ctrl_c_stops_the_answer_not_the_session():
    proc, fd = _spawn_chat()
    try:
        assert b">>> " in _read_until(fd, b">>> ", 180)
        os.write(fd, LONG_ANSWER)
        _until_streaming(fd)
        os.write(fd, b"\x03")  # Ctrl-C via the terminal's line discipline
        after = _read_until(fd, b">>> ", 180)
        assert b"stopped" in after and b">>> " in after  # back at the prompt, the session alive
        os.write(fd, b"/quit\n")
        assert _wait_draining(proc, fd, 180)[0] == 0
    finally:
        proc.kill()
        os.close(fd)


def test_second_ctrl_c_exits_cleanly():
    proc, fd = _spawn_chat()
    try:
        _read_until(fd, b">>> ", 180)
        os.write(fd, LONG_ANSWER)
        _until_streaming(fd)
        os.write(fd, b"\x03")
        _read_until(fd, b">>> ", 180)
        _read_until(fd, b"\x00never", 2)  # settle at the prompt
        os.write(fd, b"\x03")  # Ctrl-C at the prompt leaves
        code, rest = _wait_draining(proc, fd, 180)
        assert code == 0
        assert b"Traceback" not in rest
    finally:
        proc.kill()
        os.close(fd)

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

from homespec.chat.app import Chat, repl
from homespec.session import RunOptions, Session

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
    s = Session.open(RunOptions(method="ngram", ctx=384))
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


def test_save_never_replaces_a_file_that_is_not_a_chat(session, tmp_path):
    """/save onto a user's own file is refused and the file kept; onto a saved chat it rewrites it."""
    out, err = TTYless(), TTYless()
    chat = Chat(session, max_tokens=4, out=out, err=err)
    notes, chat_file = tmp_path / "notes.txt", tmp_path / "c.json"
    notes.write_text("mine\n")
    lines = iter(["Hi.", f"/save {notes}", f"/save {chat_file}", f"/save {chat_file}", "/quit"])
    repl(chat, read=lambda _: next(lines))
    assert notes.read_text() == "mine\n"
    assert f"error: {notes} exists and is not a saved homespec chat" in err.getvalue()
    assert err.getvalue().count(f"saved 2 messages to {chat_file}") == 2  # a chat file is rewritten


def test_each_answer_is_saved_and_reset_starts_a_new_file(session, chats_dir):
    from homespec.chat.store import ChatFile

    out, err = TTYless(), TTYless()
    chat = Chat(session, max_tokens=8, out=out, err=err, file=ChatFile.new())
    first = chat.file.path
    chat.ask("Name a fruit.")
    assert [m["role"] for m in json.loads(first.read_text())["messages"]] == ["user", "assistant"]  # saved already
    lines = iter(["/reset", "Name a colour.", "/quit"])
    assert repl(chat, read=lambda _: next(lines)) == 0
    assert chat.file.path != first and f"the last one stays in {first}" in err.getvalue()
    assert json.loads(first.read_text())["messages"][0]["content"] == "Name a fruit."  # the old one kept
    assert json.loads(chat.file.path.read_text())["messages"][0]["content"] == "Name a colour."
    assert f"chat saved to {chat.file.path}" in err.getvalue()


def _eof() -> str:
    raise EOFError  # Ctrl-D


def test_a_chat_that_cannot_be_saved_says_so_and_exits_1(session, tmp_path):
    from homespec.chat.store import ChatFile

    (tmp_path / "a-file").write_text("")
    out, err = TTYless(), TTYless()
    chat = Chat(session, max_tokens=4, out=out, err=err, file=ChatFile(tmp_path / "a-file" / "c.json"))
    lines = iter(["Hi"])
    assert repl(chat, read=lambda _: next(lines, None) or _eof()) == 1  # the chat goes on after the note; leaving says it failed
    assert "could not save the chat to" in err.getvalue()
    assert "error: the chat is not saved" in err.getvalue() and "hint: " in err.getvalue()


def test_context_overflow_drops_oldest_turns_and_never_crashes(session, tmp_path):
    from homespec.chat.store import ChatFile

    out, err = TTYless(), TTYless()
    chat = Chat(session, max_tokens=48, out=out, err=err, file=ChatFile(tmp_path / "c.json"))
    filler = "Tell me about rivers, lakes, seas and oceans in some detail please. " * 9
    for _ in range(3):
        chat.ask(filler)
    assert "context full" in err.getvalue()
    assert session.backend.n_past <= session.backend.max_context
    # the model no longer sees the oldest exchange, but the saved conversation keeps it
    assert len(json.loads((tmp_path / "c.json").read_text())["messages"]) == 6
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


def _spawn_chat(term: str = "dumb") -> tuple[subprocess.Popen, int]:
    master, slave = pty.openpty()
    env = dict(os.environ, COLUMNS="120", TERM=term)
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


def test_second_ctrl_c_exits_cleanly(chats_dir):
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
    # leaving saved the conversation, the stopped answer included, and said where
    path = re.search(rb"chat saved to (\S+)", rest).group(1).decode()
    saved = json.loads(open(path).read())
    assert os.path.dirname(path) == str(chats_dir)
    assert [m["role"] for m in saved["messages"]] == ["user", "assistant"]
    assert saved["messages"][0]["content"].startswith("Count from 1 to 1000")


LIVE = re.compile(rb"\x1b\[2m(\d+\.\d) tok/s \xc2\xb7 [\d.]+ tokens/pass \xc2\xb7 [^\x1b]* context \d+/2048 "
                  rb"\xc2\xb7 ttft \d+\.\d s")


def test_readout_is_live_while_the_answer_streams():
    """The status line below the streaming answer carries a tokens/s figure before the answer ends."""
    proc, fd = _spawn_chat(term="xterm-256color")
    try:
        assert b">>> " in _read_until(fd, b">>> ", 180)
        os.write(fd, LONG_ANSWER)
        seen, end = b"", time.time() + 300
        while time.time() < end and not LIVE.search(seen) and b"\n>>> " not in seen and proc.poll() is None:
            seen += _read_until(fd, b"\x00never", 0.5)
        assert LIVE.search(seen), seen[-400:]
        assert b"\n>>> " not in seen and b"\x1b[2m[" not in seen  # the answer goes on: no final readout yet
        os.write(fd, b"\x03")  # stop it: the final readout follows, the status line cleared first
        after = _read_until(fd, b">>> ", 180)
        assert re.search(rb"\x1b7\x1bD\r\x1b\[2K\x1b8\r?\n.*\[stopped \xc2\xb7 [\d.]+ tok/s", after, re.S)
        os.write(fd, b"/quit\n")
        assert _wait_draining(proc, fd, 180)[0] == 0
    finally:
        proc.kill()
        os.close(fd)


def _chat(args: list[str], stdin: str = "") -> subprocess.CompletedProcess:
    """`homespec chat` with pipes, not a terminal: no escape codes, the final readout only."""
    return subprocess.run([sys.executable, "-m", "homespec", "chat", *args], input=stdin, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, TERM="xterm-256color"))


def test_saved_as_it_goes_and_resumed(chats_dir):
    first = _chat(["-n", "12", "--ctx", "512"], "Name a fruit.\n")  # then end of input: Ctrl-D
    assert first.returncode == 0, first.stderr
    err = first.stderr
    # what the wait before the prompt is: loading (the guard learns the costs while it answers)
    assert err.index("loading the embedded SmolLM2-135M (auto on llamacpp): ") < err.index("homespec chat:")
    readout = [line for line in err.splitlines() if line.startswith("[")]
    assert len(readout) == 1 and re.search(r"\d+\.\d tok/s .* context \d+/512 · ttft \d+\.\d s", readout[0])
    assert "\x1b" not in first.stdout + err  # not a terminal: no escape codes at all
    path = re.search(r"chat saved to (\S+)", err).group(1)
    assert os.path.dirname(path) == str(chats_dir)
    msgs = json.loads(open(path).read())["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant"] and msgs[1]["content"].strip()

    again = _chat(["--resume", "--method", "ngram", "-n", "12", "--ctx", "512"], "And a vegetable?\n/quit\n")
    assert again.returncode == 0, again.stderr
    assert f"resumed 2 messages from {path}" in again.stderr
    assert ">>> Name a fruit." in again.stdout  # where the conversation stood
    msgs = json.loads(open(path).read())["messages"]  # the same file, continued
    assert [m["content"] for m in msgs][::2] == ["Name a fruit.", "And a vegetable?"]
    assert len(msgs) == 4 and msgs[3]["content"].strip()


def test_resume_of_a_missing_or_damaged_chat_is_one_line(chats_dir):
    missing = _chat(["--resume", "20990101-000000"])
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: no saved chat '20990101-000000'") and len(missing.stderr.splitlines()) == 2
    assert missing.stderr.splitlines()[1].startswith("hint: ")
    none_yet = _chat(["--resume"])
    assert none_yet.returncode == 2 and "no saved chats in" in none_yet.stderr
    chats_dir.mkdir(parents=True)
    (chats_dir / "broken.json").write_text('{"messages": [')
    broken = _chat(["--resume"])  # the latest is the damaged one
    assert broken.returncode == 1 and "Traceback" not in broken.stderr
    assert broken.stderr.startswith("error: saved chat ") and "damaged" in broken.stderr
    assert len(broken.stderr.splitlines()) == 2 and "hint: " in broken.stderr
    assert (chats_dir / "broken.json").read_text() == '{"messages": ['  # left as it was


def test_help_lists_the_commands_and_where_chats_go():
    from homespec.chat.app import COMMANDS

    out = subprocess.run([sys.executable, "-m", "homespec", "chat", "--help"], capture_output=True, text=True,
                         env=dict(os.environ, COLUMNS="100")).stdout
    for name, _ in COMMANDS:
        assert name in out
    assert "--resume" in out and "HOMESPEC_CHATS_DIR" in out and "homespec/chats" in out


class _BrokenSampler:
    """A sampler whose distribution raises mid-answer: an answer that fails before its autosave."""

    greedy = False
    temperature, top_k, top_p, seed = 1.0, 0, 1.0, 0

    def probs(self, logits):
        raise RuntimeError("sampling broke")

    def sample(self, logits, generator=None):
        raise RuntimeError("sampling broke")


def test_leaving_says_saved_only_when_the_file_is_there(session, chats_dir):
    from homespec.chat.store import ChatFile

    out, err = TTYless(), TTYless()
    chat = Chat(session, sampler=_BrokenSampler(), max_tokens=4, out=out, err=err, file=ChatFile.new())
    lines = iter(["Hi", "/quit"])
    repl(chat, read=lambda _: next(lines))  # the engine fails the answer alone: the chat says so and goes on
    assert "error: RuntimeError: sampling broke" in err.getvalue()
    assert not chat.file.path.exists() and chat.history == []
    assert "chat saved" not in err.getvalue() and "--resume" not in err.getvalue()


def test_a_line_that_is_not_utf8_is_not_sent(session, chats_dir):
    from homespec.chat.store import ChatFile

    out, err = TTYless(), TTYless()
    chat = Chat(session, max_tokens=4, out=out, err=err, file=ChatFile.new())
    lines = iter(["\udcff\udcfe", "Hi", "/quit"])  # bytes 0xff 0xfe as Python's stdin decodes them
    assert repl(chat, read=lambda _: next(lines)) == 0
    assert "is not UTF-8 text" in err.getvalue() and len(chat.history) == 2
    saved = json.loads(chat.file.path.read_text())
    assert [m["content"] for m in saved["messages"]][0] == "Hi" and "chat saved to" in err.getvalue()

"""`homespec chat`: a multi-turn conversation with a live readout, saved as it goes.

Commands: see COMMANDS. Ctrl-C stops the current answer (what was said stays in the history); a
second Ctrl-C during one, Ctrl-C or Ctrl-D at the prompt, or /quit saves and leaves. Every answer
rewrites the conversation's file (homespec.chat.store), and leaving says where it is.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from homespec.chat.readout import Answer, Totals, figures
from homespec.chat.store import ChatFile, SavedChat, is_chat_file
from homespec import userfiles
from homespec.errors import HomespecError, UsageError
from homespec.session import Session, StepFigures, TextDelta
from homespec.speculative.steps import Limits
from homespec.termline import DIM, RESET, StatusLine, is_terminal, quiet_input

GIB = 1 << 30
COMMANDS = (
    ("/stats", "the conversation's figures, memory and method"),
    ("/reset", "start a new conversation (the last one stays saved)"),
    ("/save FILE", "also write the conversation to FILE"),
    ("/help", "these commands"),
    ("/quit", "save and leave (also /exit, Ctrl-D, Ctrl-C at the prompt)"),
)


class LeaveChat(BaseException):
    """A second Ctrl-C during an answer: leave the chat."""


class _Stop:
    """Ctrl-C during an answer: the answer ends between two steps (the stream is closed there),
    never inside a backend call; a second one leaves the chat."""

    def __init__(self) -> None:
        self.stop = False

    def interrupt(self, *_: object) -> None:
        if self.stop:  # the second Ctrl-C while the first is taking effect
            raise LeaveChat
        self.stop = True


@dataclass
class Chat:
    session: Session
    sampler: object = None
    max_tokens: int = 512
    system: str | None = None
    seed: int = 0
    cache_prompt: bool = True  # False: every turn from an empty cache (each prefills the whole history)
    out: TextIO = sys.stdout
    err: TextIO = sys.stderr
    history: list[dict[str, str]] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
    file: ChatFile | None = None  # where the conversation is saved after every answer; None: nowhere
    _unsaved: bool = field(default=False, init=False, repr=False)
    _start: int = field(default=0, init=False, repr=False)  # history[:_start] no longer fits the context

    # --- the conversation --------------------------------------------------------------------

    def messages(self, in_context: bool = False) -> list[dict[str, str]]:
        """The conversation (what is saved), or the part the model still sees."""
        sys_msg = [{"role": "system", "content": self.system}] if self.system else []
        return sys_msg + (self.history[self._start:] if in_context else self.history)


    def resume(self, saved: SavedChat) -> None:
        """Continue a saved conversation: its turns, its system prompt unless one was given."""
        self.history = [dict(m) for m in saved.messages]
        self._start = 0
        self.system = self.system if self.system is not None else saved.system
        self.file = saved.file
        self._unsaved = not self.file.path.exists()  # a file kept elsewhere continues in a new one
        if saved.model and Path(saved.model).resolve() != Path(self.session.model_path).resolve():
            self._note(f"note: this chat was saved with {saved.model}; continuing with {self.session.model_path}")
        self._note(f"resumed {len(self.history)} messages from {saved.file.path}"
                   + (f" (saving to {self.file.path})" if self.file.path != saved.file.path else ""))
        for m in self.history[-2:]:  # where the conversation stands
            self.out.write((f">>> {m['content']}" if m["role"] == "user" else m["content"]) + "\n")
        self.out.flush()

    def _prompt_ids(self) -> list[int]:
        """Tokenise the history; leave the oldest turns out while it leaves no room for an answer
        (they stay in the saved conversation)."""
        tok = self.session.backend.tokenizer
        ctx = self.session.backend.max_context
        while True:
            text = tok.chat_prompt(self.messages(in_context=True), add_generation_prompt=True)
            ids = tok.encode(text, add_bos=False, special=True)
            room = ctx - len(ids)
            if room >= min(self.max_tokens, ctx // 4) or len(self.history) - self._start <= 1:
                break
            dropped = self.history[self._start:self._start + 2]
            self._start += 2
            self._note(f"context full: dropped the oldest exchange ({sum(len(m['content']) for m in dropped)} characters)")
        if len(ids) >= ctx - 1:
            raise HomespecError(f"this message alone needs {len(ids)} tokens of a {ctx}-token context",
                                hint="shorten it or restart with a larger --ctx")
        return ids

    def ask(self, text: str) -> str:
        """One user turn: stream the answer under a live readout; Ctrl-C ends it early and keeps
        what was said; every answer is saved."""
        answer = Answer(drafting=self.session.drafter is not None)
        stop = _Stop()
        self.history.append({"role": "user", "content": text})
        start = self._start
        previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, stop.interrupt)
        try:
            said, ended = self._stream(stop, answer)
        except Exception:  # a HomespecError, or worse: the turn that got no answer is not kept
            self.history.pop()
            self._start = start  # the turns left out for this message come back
            raise
        finally:
            signal.signal(signal.SIGINT, previous)
        self.out.write("\n")
        self.out.flush()
        self.history.append({"role": "assistant", "content": said})
        self.totals.add(answer.totals)
        self.autosave()
        self._readout(answer.totals, stopped=ended is not None)
        if isinstance(ended, LeaveChat):
            raise ended
        return said

    def _stream(self, stop: _Stop, answer: Answer) -> tuple[str, BaseException | None]:
        """The answer's text, and the Ctrl-C that ended it early (None when it ran to its end)."""
        pieces: list[str] = []
        status = StatusLine(self.out)
        ctx = self.session.backend.max_context
        with quiet_input(sys.stdin if status.live else None):
            try:
                ids = self._prompt_ids()
                status.write("", f"reading the prompt: {len(ids)} tokens of a {ctx}-token context")
                if stop.stop:  # Ctrl-C before the answer began
                    raise KeyboardInterrupt
                stream = self.session.stream(ids, sampler=self.sampler, limits=Limits(max_tokens=self.max_tokens),
                                             seed=self.seed, cache_prompt=self.cache_prompt)
                for r in stream:
                    if isinstance(r, StepFigures):
                        if r.prefill:
                            answer.first_token(r.step)
                        else:
                            answer.add_step(r.step)
                    elif isinstance(r, TextDelta):
                        pieces.append(r.text)
                        t = answer.totals
                        status.write(r.text, figures(t, ctx) if t.passes else
                                     f"first token after {t.ttft_s:.1f} s · context {t.context}/{ctx}")
                        if stop.stop:  # Ctrl-C: the answer ends here, before the next step runs
                            stream.close()
                            raise KeyboardInterrupt
                return "".join(pieces), None
            except (KeyboardInterrupt, LeaveChat) as e:
                return "".join(pieces), e
            finally:
                status.clear()

    # --- saving ------------------------------------------------------------------------------

    def autosave(self) -> bool:
        """Rewrite the conversation's file; a failure is a note, and leaving tries again."""
        self._unsaved = True
        if self.file is None or not self.history:
            return True
        try:
            self.file.write(self.messages(), model=self.session.model_path, method=self.session.options.method)
        except OSError as e:
            self._note(f"could not save the chat to {self.file.path}: {e.strerror}")
            return False
        self._unsaved = False
        return True

    def leave(self) -> bool:
        """Save (if anything is unsaved) and say where; False when it could not be saved."""
        if self.file is None:
            return True
        if not self.history and not self.file.path.exists():
            self._note("no messages in this conversation: nothing to save")
            return True
        # saved means the file is there: an answer that failed before its autosave left it unwritten
        if (self._unsaved or not self.file.path.exists()) and not self.autosave() or not self.file.path.exists():
            self._note(f"error: the chat is not saved\nhint: set HOMESPEC_CHATS_DIR to a writable folder, "
                       f"or /save FILE before leaving")
            return False
        self._note(f"chat saved to {self.file.path}\nresume it with `homespec chat --resume {self.file.id}`")
        return True

    def save(self, path: str) -> None:
        if not path:
            self._note("usage: /save FILE")
            return
        target = Path(path).expanduser()
        try:  # a directory, a FIFO, a device or a folder it may not write in: said before anything opens it
            userfiles.writable(path, "/save", "chat.json")
        except UsageError as e:
            self._note(f"error: {e.message}\nhint: {e.hint}")
            return
        if target.exists() and not is_chat_file(target):  # never replace a file that is not a saved chat
            self._note(f"error: {path} exists and is not a saved homespec chat\nhint: /save a new file name")
            return
        try:
            ChatFile(target).write(self.messages(), model=self.session.model_path, method=self.session.options.method)
        except OSError as e:
            self._note(f"could not save to {path}: {userfiles.write_error(e, path).message}")
            return
        self._note(f"saved {len(self.history)} messages to {path}")

    # --- commands ----------------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Handle a /command; False means quit."""
        cmd, _, arg = line.strip().partition(" ")
        if cmd in ("/quit", "/exit", "/q"):
            return False
        if cmd == "/reset":
            self._reset()
        elif cmd == "/stats":
            self.out.write(self.stats_text() + "\n")
        elif cmd == "/save":
            self.save(arg.strip())
        elif cmd == "/help":
            self._note("\n".join(f"{name:<11} {what}" for name, what in COMMANDS))
        else:
            self._note(f"unknown command {cmd}: try " + ", ".join(name for name, _ in COMMANDS))
        return True

    def _reset(self) -> None:
        kept = self.file.path if self.file is not None and self.file.path.exists() else None
        self.history.clear()
        self._start = 0
        self.totals = Totals()
        if self.file is not None:
            self.file = ChatFile.new(self.file.path.parent)
        self._note("conversation cleared" + (f"; the last one stays in {kept}" if kept else ""))

    def stats_text(self) -> str:
        s = self.session
        t = Totals(**vars(self.totals))
        t.context = s.backend.n_past
        return (f"{t.answers} answers · {figures(t, s.backend.max_context)} · " + self._setup_text()
                + (f" · {t.fallback} plain-decoding fallback steps" if t.fallback else "") + self._guard_note())

    def _setup_text(self) -> str:
        s = self.session
        mem = s.memory()
        meas = mem["measured"]["total_bytes"] / GIB
        plan = mem.get("planned", {}).get("total_bytes")
        mem_txt = f"{meas:.2f} GiB measured" + (f" / {plan / GIB:.2f} GiB planned" if plan else "")
        return f"{mem_txt} · {s.options.method} on {s.options.backend}"

    def _guard_note(self) -> str:
        """Why the guard keeps decoding plainly, when it predicts that speculation cannot pay."""
        guard = self.session.guard
        if guard is None or guard.forced or guard.chosen or guard.predicted is None or guard.predicted >= 1:
            return ""
        return f" · speculation off: predicted {guard.predicted:.2f}x plain on this machine"

    def _readout(self, t: Totals, stopped: bool) -> None:
        """The answer's figures once it has ended, on stderr."""
        text = (f"[{'stopped · ' if stopped else ''}{figures(t, self.session.backend.max_context)} · "
                f"{self._setup_text()}" + (f" · {t.fallback} plain-decoding fallback steps" if t.fallback else "")
                + f"{self._guard_note()}]")
        self.err.write(f"{DIM}{text}{RESET}\n" if is_terminal(self.err) else f"{text}\n")
        self.err.flush()

    def _note(self, text: str) -> None:
        self.err.write(f"{text}\n")
        self.err.flush()


def repl(chat: Chat, read: Callable[[str], str] = input) -> int:
    """Read-eval loop. Ctrl-C or Ctrl-D at the prompt, a second Ctrl-C during an answer, or /quit
    leaves; leaving saves. -> the exit code: 1 when the chat could not be saved."""
    chat._note("homespec chat: " + ", ".join(name for name, _ in COMMANDS) + "; Ctrl-C stops an answer")
    try:
        _loop(chat, read)
    finally:
        saved = chat.leave()
    return 0 if saved else 1


def _loop(chat: Chat, read: Callable[[str], str]) -> None:
    while True:
        try:
            line = read(">>> ")
        except (EOFError, KeyboardInterrupt):
            chat.out.write("\n")
            return
        if not line.strip():
            continue
        if not _is_text(line):
            chat._note("error: that line is not UTF-8 text (a byte no character has); it was not sent\n"
                       "hint: check the encoding of the terminal or of the input")
            continue
        if line.startswith("/"):
            if not chat.command(line):
                return
            continue
        try:
            chat.ask(line)
        except LeaveChat:
            return
        except HomespecError as e:
            chat._note(f"error: {e.message}" + (f"\nhint: {e.hint}" if e.hint else ""))


def _is_text(line: str) -> bool:
    """Whether a line read from stdin is text: bytes that are not UTF-8 arrive as lone surrogates
    (Python's surrogateescape), which no tokenizer and no saved chat can hold."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True

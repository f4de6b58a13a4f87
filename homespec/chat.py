"""`homespec chat`: a multi-turn conversation with live tokens/s and acceptance.

Commands: /stats, /reset, /save FILE, /quit. Ctrl-C stops the current answer (what was said
stays in the history); a second Ctrl-C, or one at the prompt, leaves cleanly.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

from homespec.errors import HomespecError
from homespec.runner import Session
from homespec.speculative.loop import Controller, Limits
from homespec.speculative.types import Step

GIB = 1 << 30


@dataclass
class Totals:
    tokens: int = 0
    decode_s: float = 0.0
    passes: int = 0
    emitted: int = 0
    drafted: int = 0
    accepted: int = 0
    fallback: int = 0

    def add_step(self, s: Step, drafting: bool = True) -> None:
        self.passes += 1
        self.emitted += len(s.tokens)
        self.drafted += s.draft_size
        self.accepted += s.accepted
        self.fallback += 1 if drafting and not s.speculative else 0  # plain steps the guard chose

    def line(self) -> str:
        tps = self.tokens / self.decode_s if self.decode_s else 0.0
        tau = self.emitted / self.passes if self.passes else 0.0
        rate = self.accepted / self.drafted if self.drafted else 0.0
        return f"{tps:.1f} tok/s · {tau:.2f} tokens/pass · {rate:.0%} of drafts accepted"


class LeaveChat(BaseException):
    """A second Ctrl-C during an answer: leave the chat."""


class _Stop(Controller):
    """Lets Ctrl-C end the answer between two steps, never inside a backend call."""

    def __init__(self, inner: Controller | None = None):
        self.inner = inner
        self.stop = False

    def interrupt(self, *_: object) -> None:
        if self.stop:  # the second Ctrl-C while the first is taking effect
            raise LeaveChat
        self.stop = True

    def speculate(self) -> bool:
        if self.stop:
            raise KeyboardInterrupt
        return self.inner.speculate() if self.inner else True

    def record(self, step: Step) -> None:
        if self.inner:
            self.inner.record(step)


@dataclass
class Chat:
    session: Session
    sampler: object = None
    max_tokens: int = 512
    system: str | None = None
    seed: int = 0
    out: TextIO = sys.stdout
    err: TextIO = sys.stderr
    history: list[dict[str, str]] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
    controller_factory: Callable[[Session], Controller] | None = None
    _guard: Controller | None = field(default=None, init=False, repr=False)  # this turn's guard, for the status line

    # --- the conversation --------------------------------------------------------------------

    def messages(self) -> list[dict[str, str]]:
        sys_msg = [{"role": "system", "content": self.system}] if self.system else []
        return sys_msg + self.history

    def _prompt_ids(self) -> list[int]:
        """Tokenise the history; drop the oldest turns while it leaves no room for an answer."""
        tok = self.session.backend.tokenizer
        ctx = self.session.backend.max_context
        while True:
            text = tok.chat_prompt(self.messages(), add_generation_prompt=True)
            ids = tok.encode(text, add_bos=False, special=True)
            room = ctx - len(ids)
            if room >= min(self.max_tokens, ctx // 4) or len(self.history) <= 1:
                break
            dropped = self.history[:2]
            self.history = self.history[2:]
            self._note(f"context full: dropped the oldest exchange ({sum(len(m['content']) for m in dropped)} characters)")
        if len(ids) >= ctx - 1:
            raise HomespecError(f"this message alone needs {len(ids)} tokens of a {ctx}-token context",
                                hint="shorten it or restart with a larger --ctx")
        return ids

    def ask(self, text: str) -> str:
        """One user turn: stream the answer; Ctrl-C ends it early and keeps what was said."""
        from homespec.generation import run

        self.history.append({"role": "user", "content": text})
        try:
            ids = self._prompt_ids()
        except HomespecError:
            self.history.pop()
            raise
        stop = _Stop(self.controller_factory(self.session) if self.controller_factory else None)
        self._guard = stop.inner
        pieces: list[str] = []
        before = Totals(**vars(self.totals))
        t0 = time.perf_counter()

        def on_step(step: Step, new_text: str) -> None:
            pieces.append(new_text)
            self.out.write(new_text)
            self.out.flush()
            if len(pieces) > 1:  # the first piece comes from the prefill
                self.totals.add_step(step, self.session.drafter is not None)

        previous = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, stop.interrupt)
        interrupted = False
        try:
            res = run(self.session, ids, sampler=self.sampler, limits=Limits(max_tokens=self.max_tokens),
                      seed=self.seed, on_step=on_step, controller=stop)
            answer = res.text
            self.totals.tokens += max(0, len(res.token_ids) - 1)
            self.totals.decode_s += res.decode_s
        except KeyboardInterrupt:
            interrupted = True
            answer = "".join(pieces)
            self.totals.decode_s += time.perf_counter() - t0
            self.totals.tokens += max(0, self.totals.emitted - before.emitted)
        finally:
            signal.signal(signal.SIGINT, previous)
        self.out.write("\n")
        self.history.append({"role": "assistant", "content": answer})
        self._status(interrupted)
        return answer

    # --- commands ----------------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Handle a /command; False means quit."""
        cmd, _, arg = line.strip().partition(" ")
        if cmd in ("/quit", "/exit", "/q"):
            return False
        if cmd == "/reset":
            self.history.clear()
            self._note("conversation cleared")
        elif cmd == "/stats":
            self.out.write(self.stats_text() + "\n")
        elif cmd == "/save":
            self.save(arg.strip())
        else:
            self._note(f"unknown command {cmd}: try /stats, /reset, /save FILE, /quit")
        return True

    def stats_text(self) -> str:
        s = self.session
        used = s.backend.n_past
        mem = s.memory()
        meas = mem["measured"]["total_bytes"] / GIB
        plan = mem.get("planned", {}).get("total_bytes")
        mem_txt = f"{meas:.2f} GiB measured" + (f" / {plan / GIB:.2f} GiB planned" if plan else "")
        return (f"{self.totals.line()} · context {used}/{s.backend.max_context} · {mem_txt} · "
                f"{s.options.method} on {s.options.backend}"
                + (f" · {self.totals.fallback} plain-decoding fallback steps" if self.totals.fallback else "")
                + self._guard_note())

    def _guard_note(self) -> str:
        """Why the guard keeps decoding plainly, when it predicted that speculation cannot pay."""
        stats = getattr(self._guard, "stats", None)
        if stats is None or not stats.skipped or stats.predicted is None:
            return ""
        return f" · speculation off: predicted {stats.predicted:.2f}x plain on this machine"

    def save(self, path: str) -> None:
        if not path:
            self._note("usage: /save FILE")
            return
        from homespec.atomic import write_bytes

        data = {"model": self.session.model_path, "method": self.session.options.method, "messages": self.messages()}
        try:
            write_bytes(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode())
        except OSError as e:
            self._note(f"could not save to {path}: {e.strerror}")
            return
        self._note(f"saved {len(self.history)} messages to {path}")

    def _status(self, interrupted: bool) -> None:
        self.err.write(f"\x1b[2m[{'stopped · ' if interrupted else ''}{self.stats_text()}]\x1b[0m\n"
                       if self.err.isatty() else f"[{'stopped · ' if interrupted else ''}{self.stats_text()}]\n")
        self.err.flush()

    def _note(self, text: str) -> None:
        self.err.write(f"{text}\n")
        self.err.flush()


def repl(chat: Chat, read: Callable[[str], str] = input) -> None:
    """Read-eval loop. Ctrl-C at the prompt, a second Ctrl-C in a row, or EOF leaves."""
    chat._note("homespec chat: /stats, /reset, /save FILE, /quit; Ctrl-C stops an answer")
    while True:
        try:
            line = read(">>> ")
        except EOFError:
            chat.out.write("\n")
            return
        except KeyboardInterrupt:
            chat.out.write("\n")
            return
        if not line.strip():
            continue
        if line.startswith("/"):
            if not chat.command(line):
                return
            continue
        try:
            chat.ask(line)
        except LeaveChat:
            chat.out.write("\n")
            return
        except HomespecError as e:
            chat._note(f"error: {e.message}" + (f"\nhint: {e.hint}" if e.hint else ""))

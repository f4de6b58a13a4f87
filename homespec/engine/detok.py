"""Text of an answer as its tokens arrive, a piece at a time, with the stop strings cut out.

Decoding every emitted id again at every step costs O(n) per step, O(n^2) per answer. Here each
push decodes a short window instead: the ids of the piece released last (the context a
tokenizer needs for a leading space or a merge across the boundary) plus the new ones; the new
text is what the window decodes to beyond the released piece. Two things are held back:

* an incomplete UTF-8 sequence: a byte-level token may carry half of a character (an emoji is
  often 2-4 tokens); its decode ends in U+FFFD until the rest arrives;
* a tail that could begin a stop string ("\\n\\nUs" while "\\n\\nUser:" is a stop): released once
  the text goes another way, dropped (with everything after it) once the stop string is complete.

Ids that each decode to nothing and leave the window's text as it was (control tokens) are not kept
in the window, so a long run of them costs each push its own ids, not the whole run again.

The pieces concatenate to exactly the full decode cut before the first stop string
(tests/session/test_session.py checks this on the real SmolLM2 tokenizer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from homespec.contracts.backend import Tokenizer

REPLACEMENT = "\ufffd"  # what decode(errors="replace") makes of an incomplete UTF-8 sequence


class Detokenizer:
    def __init__(self, tokenizer: "Tokenizer", stop: Sequence[str] = ()):
        self.tok = tokenizer
        self.stops = tuple(s for s in stop if s)
        self.ids: list[int] = []
        self.stopped = False  # a stop string was found: nothing more is released
        self._start = 0  # ids[_start:_read] are the piece released last (the window's context)
        self._read = 0  # ids[:_read] are in the released (or held) text
        self._held = ""  # decoded text that may begin a stop string

    def push(self, ids: Sequence[int]) -> str:
        """Add emitted ids -> the text they make final (possibly "")."""
        if self.stopped:
            return ""
        self.ids.extend(ids)
        context = self.tok.decode(self.ids[self._start:self._read])
        window = self.tok.decode(self.ids[self._start:])
        # the window's first id may change how the rest decodes (a leading BOS drops a space): it stays
        first = self._read if self._read > self._start else self._start + 1
        if window == context and len(self.ids) > first and self._textless(first):
            del self.ids[first:]  # control tokens spell nothing: the window does not grow with them
            return ""
        if window.endswith(REPLACEMENT) or len(window) <= len(context):
            return ""  # half a character, or nothing yet: wait for the next ids
        self._start, self._read = self._read, len(self.ids)
        return self._release(window[len(context):])

    def _textless(self, start: int) -> bool:
        """Do ids[start:] each decode to nothing (control tokens, which the text leaves out)? Such ids
        change no text before or after them, so they are dropped from the window: a model emitting
        thousands of them would otherwise make every push decode them all again (O(n^2) an answer)."""
        return all(not self.tok.decode([i]) for i in self.ids[start:])

    def flush(self) -> str:
        """The answer ended: whatever is still held (a character that never completed decodes
        to U+FFFD, as the full decode does; a stop string's beginning is plain text after all)."""
        if self.stopped:
            return ""
        text = ""
        if self._read < len(self.ids):
            context = self.tok.decode(self.ids[self._start:self._read])
            text = self.tok.decode(self.ids[self._start:])[len(context):]
            self._start = self._read = len(self.ids)
        text = self._release(text)
        if self.stopped:
            return text
        text, self._held = text + self._held, ""
        return text

    def _release(self, new: str) -> str:
        """Cut at the first complete stop string; hold a tail that may begin one."""
        text = self._held + new
        if not self.stops:
            self._held = ""
            return text
        # a stop string can only begin in the held tail or the new text: anything released
        # earlier was checked not to begin one
        cut = min((text.find(s) for s in self.stops if s in text), default=-1)
        if cut >= 0:
            self.stopped = True
            self._held = ""
            return text[:cut]
        keep = _stop_prefix(text, self.stops)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]


def _stop_prefix(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest tail of `text` that is the beginning of some stop string."""
    for n in range(min(len(text), max(len(s) for s in stops) - 1), 0, -1):
        tail = text[-n:]
        if any(s.startswith(tail) for s in stops):
            return n
    return 0

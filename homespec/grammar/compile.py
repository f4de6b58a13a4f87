"""Grammars, checked when a request arrives: a JSON schema, any JSON object, or a Lark grammar
(llguidance's dialect, which embeds JSON schemas with `%json{...}`), each compiled against the
model's vocabulary. A grammar that does not compile is the client's error, said before the request
takes a slot.

Compiling is the dear part (a 10,000-property schema takes seconds), so it happens here, once, on
the compiler's own thread and never on the engine's: the engine only copies the compiled matcher
for each answer (`Grammar.start`). Compiles run one at a time, bounded in size (MAX_GRAMMAR_BYTES
of llguidance grammar, llguidance's own parser limits) and in time (COMPILE_S from the request,
its wait for the compiler included): past either, a GrammarError (the server's 400). A compile
that outlives its request cannot be stopped inside llguidance; it finishes within the size bound
and is dropped, and one still queued is never started.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import threading
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

from homespec.errors import HomespecError
from homespec.grammar.guide import Guide

# llguidance's JSON options: whitespace between tokens as the model likes it (models pretty-print;
# forcing compact JSON moves the answer away from what the model means: SmolLM2 then gives a
# different age for the same person). A bounded pattern such as [\n ]{0,32} would cost 28 ms a
# mask instead of 0.1 ms (it defeats llguidance's vocabulary slices); max_tokens bounds the rest.
JSON_OPTIONS = {"whitespace_flexible": True}
# The bounds: a 10,000-property schema is ~350 KB of llguidance grammar and compiles in ~1.5 s
# on one core of a 2-core EPYC (docs/server.md, "Structured output"); 1 MiB is ~3x that.
MAX_GRAMMAR_BYTES = 1 << 20
# llguidance's compile time grows with the square of an object's optional properties (any of the
# later ones may follow each): 1,000 take 0.12 s, 4,000 1.8 s, 10,000 12 s on that core. A schema
# with more in one object is refused before compiling, not after seconds of it.
MAX_OPTIONAL_PROPERTIES = 4096
COMPILE_S = 10.0
COMPILE_NICE = 10  # the compiler thread's niceness, above the engine's 0
_BOUNDS: list[Any] = []  # llguidance.LLParserLimits, made on first use (llguidance is imported lazily)
_BOUNDS_LOCK = threading.Lock()


class GrammarError(HomespecError):
    """A schema or grammar that does not compile (the request's 400)."""


class _Compiler:
    """One daemon thread compiling grammars in turn (a pool's threads would hold the process at its
    exit until a long compile ends; a compile nobody waits for is never worth that), at a lower CPU
    priority than the engine's threads (Linux's per-thread nice): where cores are few, llama.cpp's
    threads (one per core, meeting at spinning barriers) would otherwise share a core with the
    compile and every step of every answer would wait for the slowest of them; niced, the answers
    being decoded go first and the compile takes what they leave (docs/server.md, "Structured
    output": 6.3x an innocent request's time at the same priority, 0.6-1.4x niced)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, fn, *args) -> Future:
        job: Future = Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="homespec-grammar", daemon=True)
                self._thread.start()
        self._jobs.put((job, fn, args))
        return job

    def _run(self) -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), COMPILE_NICE)  # this thread only (Linux)
        except (AttributeError, OSError):  # not Linux, or not permitted: the default priority
            pass
        while True:
            job, fn, args = self._jobs.get()
            if not job.set_running_or_notify_cancel():  # its request gave up before it started
                continue
            try:
                job.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to the request that waits for it
                job.set_exception(e)


_COMPILER = _Compiler()


@dataclass(frozen=True)
class Grammar:
    """A compiled grammar for one vocabulary; `start()` gives each answer its own Guide."""

    source: str  # llguidance's grammar (its JSON form)
    what: str  # for messages: "the JSON schema 'person'"
    vocab: Any = field(repr=False, compare=False)  # llguidance.LLTokenizer
    matcher: Any = field(repr=False, compare=False)  # compiled, never advanced: what each answer copies

    def start(self) -> Guide:
        """A fresh matcher for one answer: a copy of the compiled one (microseconds, not a compile)."""
        return Guide(self.matcher.deep_copy(), self.vocab.vocab_size, tuple(self.vocab.eos_tokens))


def json_schema(schema: Any, vocab: Any, what: str = "the JSON schema") -> Grammar:
    """A grammar whose strings are the JSON documents valid under `schema`."""
    from llguidance import LLMatcher

    if not isinstance(schema, dict):
        raise GrammarError(f"{what} must be a JSON object, not {type(schema).__name__}",
                           hint='send e.g. {"type": "object", "properties": {...}}')
    check_size(schema, what)
    try:
        source = LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=JSON_OPTIONS)
    except (ValueError, TypeError, RecursionError) as e:
        raise GrammarError(f"{what} cannot be read: {' '.join(str(e).split())}", hint="check the schema") from None
    return _checked(source, vocab, what)


def check_size(schema: Any, what: str) -> None:
    """Refuse a schema whose compile time is known to be out of bounds before compiling it: an
    object with more than MAX_OPTIONAL_PROPERTIES optional properties (GrammarError)."""
    stack, seen = [schema], 0
    while stack:
        node = stack.pop()
        seen += 1
        if seen > 1_000_000:  # a body is at most --max-body-mib: this only stops a walk that cannot end
            break
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        props = node.get("properties")
        if isinstance(props, dict):
            required = node.get("required") if isinstance(node.get("required"), list) else []
            optional = len(set(props) - {r for r in required if isinstance(r, str)})
            if optional > MAX_OPTIONAL_PROPERTIES:
                raise GrammarError(f"{what} has an object of {optional:,} optional properties: more than the "
                                   f"{MAX_OPTIONAL_PROPERTIES:,} that compile in time here",
                                   hint="list most of them in its \"required\", or send fewer")
        stack.extend(v for k, v in node.items() if k not in ("const", "enum", "default", "examples"))


def json_object(vocab: Any) -> Grammar:
    """Any JSON object (OpenAI's `response_format: {"type": "json_object"}`)."""
    return json_schema({"type": "object"}, vocab, "a JSON object")


def lark(text: str, vocab: Any, what: str = "the grammar") -> Grammar:
    from llguidance import LLMatcher

    try:
        source = LLMatcher.grammar_from_lark(text)
    except (ValueError, TypeError, RecursionError) as e:
        raise GrammarError(f"{what} cannot be read: {' '.join(str(e).split())}", hint="check the grammar") from None
    return _checked(source, vocab, what)


def _checked(source: str, vocab: Any, what: str) -> Grammar:
    """Compile `source` on the compiler's thread within the bounds -> the Grammar (GrammarError past them)."""
    size = len(source.encode("utf-8"))
    if size > MAX_GRAMMAR_BYTES:
        raise GrammarError(f"{what} is too large to compile: {size / 1024:,.0f} KiB of grammar, at most "
                           f"{MAX_GRAMMAR_BYTES >> 10:,} KiB", hint="send a smaller schema (fewer properties or "
                           "alternatives), or split the request")
    job: Future = _COMPILER.submit(_compile, source, vocab, what)
    try:
        return job.result(timeout=COMPILE_S)
    except FutureTimeout:
        job.cancel()  # never started: it never will; started: it finishes within the size bound, unused
        raise GrammarError(f"{what} took longer than {COMPILE_S:g} s to compile (waiting for the compiler "
                           "included)", hint="send a smaller schema, or retry when fewer large ones are compiling") \
            from None


def _compile(source: str, vocab: Any, what: str) -> Grammar:
    """On the compiler's thread: the matcher, refused when the grammar is malformed, beyond
    llguidance's limits, or matches nothing at all (a schema that only refers to itself)."""
    from llguidance import LLMatcher

    matcher = LLMatcher(vocab, source, log_level=0, limits=_limits())
    if matcher.is_error():
        raise GrammarError(f"{what} cannot be compiled: {' '.join(matcher.get_error().split())}",
                           hint="use the JSON Schema keywords llguidance supports (docs/server.md, "
                                "\"Structured output\")")
    if not _admits_a_token(matcher, vocab.vocab_size):
        raise GrammarError(f"{what} matches nothing: no answer can follow it (a schema that only refers to "
                           "itself, with no value to end on)", hint="give the schema a case that is not a $ref, "
                                                                     "e.g. a type")
    return Grammar(source, what, vocab, matcher)


def _admits_a_token(matcher: Any, n_vocab: int) -> bool:
    """Whether the grammar's first mask allows any token (an empty language allows none, not even
    the end: answering under it would end at once with nothing said)."""
    words = (ctypes.c_uint32 * ((n_vocab + 31) // 32))()
    matcher.unsafe_compute_mask_ptr(ctypes.addressof(words), ctypes.sizeof(words))
    return any(words) and not matcher.is_error()


def _limits() -> Any:
    """llguidance's parser limits (its defaults, named here so that the bound is homespec's own)."""
    with _BOUNDS_LOCK:
        if not _BOUNDS:
            from llguidance import LLParserLimits

            _BOUNDS.append(LLParserLimits(max_grammar_size=500_000, max_lexer_states=250_000,
                                          initial_lexer_fuel=1_000_000, step_lexer_fuel=200_000,
                                          verbose_errors=False))
        return _BOUNDS[0]

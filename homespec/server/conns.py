"""A slow-loris guard for uvicorn's HTTP/1.1 protocol: bounds on connections that send no request.

uvicorn bounds the wait between two requests of a kept-alive connection (`timeout_keep_alive`),
but only until the first byte of the next request: a client that connects and sends nothing, or
a header a byte at a time, holds its connection (a socket, a file descriptor, a slot of the
accept backlog) forever, and a few thousand of them starve every other client. So:

- a connection must send a whole request's headers within `header_timeout_s` of connecting, or of
  its previous answer's end, else it is closed;
- at most `max_idle` connections may wait for a request's headers at once: a new connection beyond
  that closes the longest-waiting one. Connections with a request in progress (a prompt being
  answered, however long) are never counted or closed here.

`guarded_protocol(...)` is the class given to `uvicorn.Config(http=...)` (homespec.server.run).
"""

from __future__ import annotations

import logging
import time

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("homespec.server")
HEADER_TIMEOUT_S = 10.0  # seconds to send a request's headers (nginx allows 60, Apache 20-40)
MAX_IDLE = 64  # connections waiting for a request's headers at once


class GuardedH11Protocol(H11Protocol):
    header_timeout_s = HEADER_TIMEOUT_S
    max_idle = MAX_IDLE

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_headers()
        idle = sorted((c for c in self.connections if getattr(c, "_idle_since", None) is not None),
                      key=lambda c: c._idle_since)
        for c in idle[:max(0, len(idle) - self.max_idle)]:  # the longest-waiting first
            c._close_idle("too many connections wait for a request")

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:  # a whole request's headers came: a request is in progress
            self._headers_came()

    def on_response_complete(self) -> None:
        before = self.cycle
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle is before:  # now waiting for the next request
            self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._headers_came()
        super().connection_lost(exc)

    def _await_headers(self) -> None:
        self._headers_came()
        self._idle_since = time.monotonic()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._close_idle,
                                                  f"no request within {self.header_timeout_s:g} s")

    def _headers_came(self) -> None:
        self._idle_since = None
        timer = getattr(self, "_header_timer", None)
        if timer is not None:
            timer.cancel()
            self._header_timer = None

    def _close_idle(self, why: str) -> None:
        self._headers_came()
        if not self.transport.is_closing():
            _closed.note(why)
            self.transport.close()


class _Tally:
    """Closed connections, logged at most once every LOG_EVERY_S (a flood must not flood the log)."""

    LOG_EVERY_S = 10.0

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.logged = float("-inf")

    def note(self, why: str) -> None:
        self.counts[why] = self.counts.get(why, 0) + 1
        if time.monotonic() - self.logged >= self.LOG_EVERY_S:
            self.logged = time.monotonic()
            log.info("closed %s", "; ".join(f"{n} connection{'s' * (n > 1)}: {w}" for w, n in self.counts.items()))
            self.counts.clear()


_closed = _Tally()


def guarded_protocol(header_timeout_s: float = HEADER_TIMEOUT_S, max_idle: int = MAX_IDLE) -> type[H11Protocol]:
    """The protocol class with these bounds."""
    return type("GuardedH11Protocol", (GuardedH11Protocol,),
                {"header_timeout_s": header_timeout_s, "max_idle": max_idle})

"""Serve an app with uvicorn on a socket bound before the model loads (a port in use fails at
once), and shut down cleanly. The first SIGINT / SIGTERM closes the listening socket and the engine
takes no new request; running and waiting answers get SHUTDOWN_S to finish, then every one still
going is ended by the engine, so each client reads an ending in its route's shape (a streamed
error event and `[DONE]`, a 503 body) instead of a cut connection. A second signal ends them at
once. Connections then get END_S to write their ending (a client that reads nothing is cut then,
logged in one line): serving stops within SHUTDOWN_S + END_S of the first signal (END_S of a
second), then the engine frees the model and the process exits 0."""

from __future__ import annotations

import errno
import ipaddress
import logging
import signal
import socket
import sys
import threading
import time
from typing import Callable

import uvicorn

from homespec.errors import HomespecError, UsageError
from homespec.server.conns import HEADER_TIMEOUT_S, MAX_IDLE, guarded_protocol

SHUTDOWN_S = 10.0  # seconds running answers get to finish after SIGINT / SIGTERM
END_S = 5.0  # then seconds connections get to write the ending of the answers cut
WATCH_S = 0.25  # how often the server looks whether its engine has stopped
FAILED_LINGER_S = 2.0  # then how long /health says why, before the server exits
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: any free port)."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is out of range", hint="use --port 8080 (or 1 to 65535; 0 picks a free one)")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        raise UsageError(f"--host {host} is not an address of this machine",
                         hint="use --host 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)") from None
    family, _, _, _, addr = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise HomespecError(f"port {port} on {host} is already in use",
                                hint=f"stop what serves there, or pick another with --port {port + 1}") from None
        raise HomespecError(f"cannot listen on {host}:{port}: {e.strerror}",
                            hint="pick another --host or --port (ports below 1024 need root)") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1"  # every interface: this machine reaches it on loopback
    return f"http://{shown}:{port}/v1"


def is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """The warning a server open beyond this machine without a key prints on start."""
    if is_loopback(host) or api_key:
        return None
    return (f"warning: serving on {host} without --api-key: anyone who can reach this machine can use the model "
            "(set --api-key or $HOMESPEC_API_KEY)")


def log_to_stderr() -> None:
    """One line per event on stderr: `homespec serve: ...`."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("homespec serve: %(message)s"))
    for name in ("homespec.server", "homespec.engine"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def serve(app, sock: socket.socket, *, shutdown_s: float = SHUTDOWN_S, stop_when: Callable[[], str | None] | None = None,
          header_timeout_s: float = HEADER_TIMEOUT_S, max_idle: int = MAX_IDLE,
          stop_taking: Callable[[], None] | None = None, end_all: Callable[[], None] | None = None) -> str | None:
    """Run until SIGINT / SIGTERM, or until `stop_when()` gives a reason (the engine has stopped) ->
    the signal's name or that reason (None if the server stopped by itself). `stop_taking` and
    `end_all`: the engine's (the module docstring: the first signal calls one, the drain's end or a
    second signal the other).

    uvicorn handles both signals while it runs and raises them again once it has shut down;
    handlers installed here first take them then, so the process is not killed on its way out.
    Outside the main thread (a test's server) no handler is installed. Connections that send no
    request are bounded (homespec.server.conns)."""
    caught: list[str] = []
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, lambda sig, _f: caught.append(signal.Signals(sig).name))
                for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=shutdown_s + END_S if end_all else shutdown_s,
                            timeout_keep_alive=5, http=guarded_protocol(header_timeout_s, max_idle))
    server = _Draining(config, shutdown_s, stop_taking, end_all)
    if stop_when is not None:
        threading.Thread(target=_watch, args=(server, stop_when, caught), name="homespec-watch", daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    return caught[0] if caught else None


class _Draining(uvicorn.Server):
    """uvicorn's server, stopping as the module docstring says: no `force_exit` on a second SIGINT
    (it cancels the answers' tasks mid-write: a traceback each, and no ending for their clients)."""

    def __init__(self, config, shutdown_s: float, stop_taking: Callable[[], None] | None,
                 end_all: Callable[[], None] | None) -> None:
        super().__init__(config)
        self.shutdown_s, self.stop_taking, self.end_all = shutdown_s, stop_taking, end_all

    def handle_exit(self, sig: int, frame) -> None:
        if self.end_all is None:
            return super().handle_exit(sig, frame)
        self._captured_signals.append(sig)
        first = not self.should_exit
        self.should_exit = True
        # each on a thread of its own: a signal handler runs between two bytecodes of the main
        # thread, which may hold the engine's lock right then
        if first:
            if self.stop_taking is not None:
                _later(0.0, self.stop_taking)
            _later(self.shutdown_s, self.end_all)
        else:
            _later(0.0, self.end_all)


def _later(delay_s: float, fn: Callable[[], None]) -> None:
    timer = threading.Timer(delay_s, fn)
    timer.daemon = True
    timer.start()


def _watch(server, stop_when: Callable[[], str | None], caught: list[str]) -> None:
    """Stop the server once `stop_when` gives a reason, FAILED_LINGER_S later: meanwhile /health
    answers 503 with it, for a load balancer (or a test) to see."""
    while not server.should_exit:
        if (why := stop_when()) is not None:
            time.sleep(FAILED_LINGER_S)
            caught.append(why)
            server.should_exit = True
            return
        time.sleep(WATCH_S)

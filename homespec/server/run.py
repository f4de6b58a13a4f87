"""Serve an app with uvicorn on a socket bound before the model loads (a port in use fails at
once), and shut down cleanly: SIGINT / SIGTERM stop taking connections, running answers get
SHUTDOWN_S to finish before they are cancelled, then the engine closes and the process exits 0."""

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

from homespec.errors import HomespecError, UsageError
from homespec.server.conns import HEADER_TIMEOUT_S, MAX_IDLE, guarded_protocol

SHUTDOWN_S = 10.0  # seconds running answers get to finish after SIGINT / SIGTERM
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
          header_timeout_s: float = HEADER_TIMEOUT_S, max_idle: int = MAX_IDLE) -> str | None:
    """Run until SIGINT / SIGTERM, or until `stop_when()` gives a reason (the engine has stopped) ->
    the signal's name or that reason (None if the server stopped by itself).

    uvicorn handles both signals while it runs and raises them again once it has shut down;
    handlers installed here first take them then, so the process is not killed on its way out.
    Outside the main thread (a test's server) no handler is installed. Connections that send no
    request are bounded (homespec.server.conns)."""
    import uvicorn

    caught: list[str] = []
    main = threading.current_thread() is threading.main_thread()
    previous = {s: signal.signal(s, lambda sig, _f: caught.append(signal.Signals(sig).name))
                for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                            timeout_graceful_shutdown=shutdown_s, timeout_keep_alive=5,
                            http=guarded_protocol(header_timeout_s, max_idle))
    server = uvicorn.Server(config)
    if stop_when is not None:
        threading.Thread(target=_watch, args=(server, stop_when, caught), name="homespec-watch", daemon=True).start()
    try:
        server.run(sockets=[sock])
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    return caught[0] if caught else None


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

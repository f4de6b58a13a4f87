"""The slow-loris guard (homespec.server.conns) on a real uvicorn server on 127.0.0.1: a connection
that sends no request is closed after the header timeout, at most `max_idle` wait at once, and a
client with a request still gets its answer."""

from __future__ import annotations

import http.client
import select
import socket
import threading
import time

import pytest

from homespec.server.run import bind, serve

HEADER_TIMEOUT_S = 1.0
MAX_IDLE = 8


async def hello(scope, receive, send):
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"hello"})


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server():
    sock = bind("127.0.0.1", 0)
    done = threading.Event()
    t = threading.Thread(target=serve, args=(hello, sock), daemon=True,
                         kwargs={"stop_when": lambda: "done" if done.is_set() else None, "shutdown_s": 1,
                                 "header_timeout_s": HEADER_TIMEOUT_S, "max_idle": MAX_IDLE})
    t.start()
    port = sock.getsockname()[1]
    yield port
    done.set()
    t.join(10)


def _open(sockets: list[socket.socket]) -> int:
    """How many of these connections the server still holds open."""
    alive = 0
    for s in sockets:
        readable, _, _ = select.select([s], [], [], 0)
        if not readable:
            alive += 1
            continue
        try:
            alive += s.recv(1, socket.MSG_PEEK) != b""
        except OSError:
            pass
    return alive


def _get(port: int) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/")
    body = conn.getresponse().read()
    conn.close()
    return body


def test_idle_connections_are_bounded_in_number_and_time(server):
    idle = [socket.create_connection(("127.0.0.1", server)) for _ in range(3 * MAX_IDLE)]
    try:
        assert _get(server) == b"hello"  # the server answers while they wait
        deadline = time.monotonic() + 5
        while _open(idle) > MAX_IDLE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _open(idle) <= MAX_IDLE
        time.sleep(HEADER_TIMEOUT_S + 1.0)
        assert _open(idle) == 0
        assert _get(server) == b"hello"
    finally:
        for s in idle:
            s.close()


def test_headers_sent_a_byte_at_a_time_are_cut_off(server):
    s = socket.create_connection(("127.0.0.1", server))
    try:
        t0 = time.monotonic()
        closed = False
        for byte in b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200:
            try:
                s.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            if _open([s]) == 0:
                closed = True
                break
            time.sleep(0.1)
        assert closed and time.monotonic() - t0 < HEADER_TIMEOUT_S + 2
    finally:
        s.close()


def test_a_kept_alive_connection_serves_requests_and_then_times_out(server):
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=10)
    for _ in range(3):
        conn.request("GET", "/")
        assert conn.getresponse().read() == b"hello"
    time.sleep(HEADER_TIMEOUT_S + 1.0)
    assert _open([conn.sock]) == 0
    conn.close()

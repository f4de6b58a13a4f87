"""A Hugging Face hub on 127.0.0.1, serving the routes huggingface_hub 2.4.0 calls:

  GET  /api/models/{repo}/revision/{rev}[?blobs=True]   model_info: {"id", "sha", "siblings": [...]}
  GET  /api/models/{repo}/tree/{rev}?recursive=True     list_repo_tree (snapshot_download)
  GET  /api/models/{repo}, POST .../paths-info/{rev}    repo_info and paths_info (HfFileSystem)
  HEAD /{repo}/resolve/{rev}/{path}                     file metadata: X-Repo-Commit, ETag, Content-Length
  GET  /{repo}/resolve/{rev}/{path}  (Range honoured)   the bytes

Errors carry the hub's X-Error-Code header (RepoNotFound, EntryNotFound, GatedRepo), which
huggingface_hub's hf_raise_for_status turns into its typed errors. Every request is logged with the
Range asked for and the body bytes sent, so a test can bound what a command read.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import signal
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Repo:
    files: dict[str, Path]  # path in repo -> file on disk
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    gated: bool = False
    claimed: dict[str, int] = field(default_factory=dict)  # sizes the hub claims instead of the real ones


@dataclass
class Hit:
    method: str
    path: str
    range: str | None
    sent: int


STALL_BYTES = 11 * 2**20  # what a stalled GET sends before it waits (Hub.stall_once)


@dataclass
class Hub:
    repos: dict[str, Repo] = field(default_factory=dict)
    log: list[Hit] = field(default_factory=list)
    token: str = "hf_test_token"  # the one token that opens a gated repo
    stall_once: set[str] = field(default_factory=set)  # file paths whose next GET sends 11 MiB, then waits
    release: threading.Event = field(default_factory=threading.Event)  # ends a stalled GET
    drop_once: set[str] = field(default_factory=set)  # file paths whose next GET stops 1 MiB short
    url: str = ""

    def sent(self, path_part: str = "") -> int:
        return sum(h.sent for h in self.log if h.method == "GET" and path_part in h.path)


def _etag(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    hub: Hub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _reply(self, code: int, body: bytes = b"", headers: dict | None = None, error: str | None = None):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if error:
            self.send_header("X-Error-Code", error)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.hub.log.append(Hit(self.command, self.path, self.headers.get("Range"), len(body) if self.command != "HEAD" else 0))

    def _json(self, data) -> None:
        self._reply(200, json.dumps(data).encode(), {"Content-Type": "application/json"})

    def _repo(self, parts: list[str]) -> tuple[str, Repo | None]:
        name = "/".join(parts[:2])
        return name, self.hub.repos.get(name)

    def _api(self, parts: list[str]) -> None:
        name, repo = self._repo(parts)
        if repo is None:
            return self._reply(401, b"{}", error="RepoNotFound")
        sizes = {p: repo.claimed.get(p, f.stat().st_size) for p, f in repo.files.items()}
        if len(parts) == 2 or parts[2] == "revision":
            siblings = [{"rfilename": p, "size": s} for p, s in sizes.items()]
            return self._json({"id": name, "sha": repo.commit, "siblings": siblings, "gated": repo.gated})
        if parts[2] in ("tree", "paths-info"):
            return self._json([{"type": "file", "path": p, "size": s, "oid": hashlib.sha1(p.encode()).hexdigest()}
                               for p, s in sizes.items()])
        self._reply(404, b"{}")

    def _resolve(self, parts: list[str]) -> None:
        _, repo = self._repo(parts)
        if repo is None:
            return self._reply(401, b"", error="RepoNotFound")
        if repo.gated and self.headers.get("Authorization") != f"Bearer {self.hub.token}":
            return self._reply(401, b"", error="GatedRepo")
        path = "/".join(parts[4:])
        file = repo.files.get(path)
        headers = {"X-Repo-Commit": repo.commit}
        if file is None:
            return self._reply(404, b"", headers, error="EntryNotFound")
        data = file.read_bytes()
        headers |= {"ETag": f'"{_etag(file)}"', "Accept-Ranges": "bytes"}
        rng = self.headers.get("Range")
        if self.command == "HEAD":
            return self._reply(200, b"", headers | {"Content-Length": str(repo.claimed.get(path, len(data)))})
        start, end = 0, len(data) - 1
        if rng:
            a, _, b = rng.removeprefix("bytes=").partition("-")
            start, end = int(a), min(int(b) if b else len(data) - 1, len(data) - 1)
            if start >= len(data):
                return self._reply(416, b"", headers)
        body = data[start:end + 1]
        self.send_response(206 if rng else 200)
        for k, v in headers.items():
            self.send_header(k, v)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        sent = STALL_BYTES
        # a connection that hangs mid-file until the client gives up: only a GET of more than the
        # stalled 11 MiB (a download, not a read of the header's first bytes)
        if path in self.hub.stall_once and len(body) > sent:
            self.hub.stall_once.discard(path)
            try:
                self.wfile.write(body[:sent])
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass
            self.hub.log.append(Hit("GET", self.path, rng, sent))  # logged before the wait, not after
            self.hub.release.wait(60)
            self.close_connection = True
            return
        dropped = path in self.hub.drop_once
        if dropped:  # a dropped connection: all but the last MiB of the body, then the socket closes
            self.hub.drop_once.discard(path)
            body = body[: max(0, len(body) - 2**20)]
            self.close_connection = True
        try:
            self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # a header reader hangs up once it has what it needs
        self.hub.log.append(Hit("GET", self.path, rng, len(body)))

    def _route(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "models"] and len(parts) >= 4:
            return self._api(parts[2:])
        if len(parts) >= 5 and parts[2] == "resolve":
            return self._resolve(parts)
        self._reply(404, b"")

    def do_POST(self):  # paths-info (HfFileSystem): the body names the paths; all files are answered
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._route()

    do_GET = _route
    do_HEAD = _route


def start(hub: Hub):
    """Serve `hub` on 127.0.0.1 in a thread; -> the server (call .shutdown() and .server_close())."""
    handler = type("HubHandler", (_Handler,), {"hub": hub})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    hub.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    return httpd


@contextlib.contextmanager
def served(hub: Hub):
    """`hub` served on 127.0.0.1 (start) for the block, then shut down and its socket closed."""
    httpd = start(hub)
    try:
        yield hub
    finally:
        httpd.shutdown()
        httpd.server_close()


def interrupt_in_stall(proc, hub: Hub, partial: Path) -> str:
    """Wait until `hub` holds a stalled GET and the download's `partial` file has bytes on disk (or
    `proc` ended), then Ctrl-C `proc` and let the stall go -> its stderr (`proc.returncode` is set)."""
    for _ in range(1200):  # a wait for the stall, not a timing
        stalled = any(h.sent == STALL_BYTES for h in list(hub.log))
        if stalled and partial.exists() and partial.stat().st_size > 0 or proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    hub.release.set()
    return err


def use_hub(monkeypatch, url: str, tmp_path: Path) -> None:
    """Point huggingface_hub at the hub on 127.0.0.1: its endpoint, a fresh cache and home under
    tmp_path, no telemetry and no token."""
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)

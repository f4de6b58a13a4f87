"""Byte sources for header readers: a local file, or an HTTP(S) URL read with Range requests
through huggingface_hub's HTTP client.

A header reader asks for "the next n bytes" and never seeks backwards, so both sources are
sequential streams. The URL source fetches the header in growing Range chunks (256 KiB, then
doubling) so that a 1.8 MB header costs a handful of requests and a 70 GB file is never
downloaded. A server that ignores Range answers 200 with the whole file: we keep reading that
one response only until the caller stops asking (max_bytes caps it), then close it.
"""

from __future__ import annotations

import ipaddress
import os
import re
import time
import urllib.parse
from homespec.errors import FormatError, UsageError

_FIRST_CHUNK = 256 * 1024
_READ_BLOCK = 64 * 1024  # socket reads between deadline checks


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_network_allowed(url: str) -> None:
    """HOMESPEC_NO_NETWORK=1 (set by the test suite) forbids every host but loopback."""
    if os.environ.get("HOMESPEC_NO_NETWORK") == "1" and not _is_loopback(urllib.parse.urlsplit(url).hostname):
        raise UsageError(
            f"network access is disabled (HOMESPEC_NO_NETWORK=1): {url}",
            hint="download the file and pass its local path, or unset HOMESPEC_NO_NETWORK",
        )


def check_online(url: str) -> None:
    """The hub's offline mode (HF_HUB_OFFLINE) stops its HTTP session, which reads every URL: said as
    for a repo that is not in the cache, before any request."""
    if _offline():
        raise FormatError(f"cannot read {url}: HF_HUB_OFFLINE is set",
                          hint="unset HF_HUB_OFFLINE to read it, or download the file and pass its local path")


def _offline() -> bool:
    """The hub's own reading of HF_HUB_OFFLINE (its constants, read when it was imported)."""
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except ImportError:
        return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def normalize_url(url: str) -> str:
    """A Hugging Face page link (`/blob/`) names the HTML viewer; `/resolve/` names the file."""
    parts = urllib.parse.urlsplit(url)
    if parts.hostname in ("huggingface.co", "hf.co") and "/blob/" in parts.path:
        parts = parts._replace(path=parts.path.replace("/blob/", "/resolve/", 1))
    return urllib.parse.urlunsplit(parts)


_MAX_HOPS = 10


def hub_endpoint() -> str:
    """The hub's address: HF_ENDPOINT (read at call time), else https://huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def _is_hub_host(url: str) -> bool:
    """huggingface.co, hf.co, or the host HF_ENDPOINT names: the hosts the hub token is sent to."""
    host = urllib.parse.urlsplit(url).netloc
    return host in ("huggingface.co", "hf.co") or host == urllib.parse.urlsplit(hub_endpoint()).netloc


def _headers(url: str) -> dict[str, str]:
    """The hub's own headers (user agent, the token from HF_TOKEN or `hf auth login`) for hub hosts;
    a plain user agent elsewhere. No compression: byte offsets are file offsets."""
    if _is_hub_host(url):
        from huggingface_hub.utils import build_hf_headers

        headers = dict(build_hf_headers())
    else:
        headers = {"User-Agent": "homespec"}
    headers["Accept-Encoding"] = "identity"
    return headers


class FileSource:
    """Sequential reads from a local file."""

    def __init__(self, path: str):
        self.path = path
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self.file_size: int | None = os.fstat(self._f.fileno()).st_size

    def read(self, n: int) -> bytes:
        return self._f.read(n)

    def close(self) -> None:
        self._f.close()


class URLSource:
    """Sequential reads from a URL: Range requests in growing chunks, within one overall deadline.

    Requests go through huggingface_hub's shared HTTP client (utils.get_session), so proxies, CA
    certificates and the token are the ones the hub's own downloads use. Redirects are followed
    here, one hop at a time, to re-check HOMESPEC_NO_NETWORK and to drop the token on the way to
    another host (the hub sends /resolve/ to a CDN)."""

    def __init__(self, url: str, timeout_s: float = 30.0):
        self.url = normalize_url(url)
        check_network_allowed(self.url)
        check_online(self.url)
        self.file_size: int | None = None
        self._deadline = time.monotonic() + timeout_s
        self._pos = 0
        self._chunk = _FIRST_CHUNK
        self._resp = None  # an open response we are still consuming
        self._body = None  # its byte iterator
        self._pending = b""  # bytes of the current response received but not handed out yet
        self._resp_left = 0  # bytes of the current ranged response not read yet (-1: unbounded 200)
        self._requests = 0
        self._eof = False

    def _remaining(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise FormatError(
                f"timed out reading the header of {self.url}",
                hint="check the connection, or download the file and pass its local path",
            )
        return left

    def _get(self, rng: str):
        """GET with a Range header, following redirects; -> the streamed final response."""
        import httpx2
        from huggingface_hub.utils import get_session

        url, headers = self.url, _headers(self.url) | {"Range": rng}
        for _ in range(_MAX_HOPS):
            self._requests += 1
            try:
                req = get_session().build_request("GET", url, headers=headers, timeout=self._remaining())
                resp = get_session().send(req, stream=True, follow_redirects=False)
            except httpx2.TransportError as e:
                raise UsageError(f"cannot reach {url}: {type(e).__name__} {e}".strip(),
                                 hint="check the URL and the connection") from None
            if resp.status_code not in (301, 302, 303, 307, 308) or "location" not in resp.headers:
                return resp
            resp.close()
            nxt = urllib.parse.urljoin(url, resp.headers["location"])
            check_network_allowed(nxt)
            if urllib.parse.urlsplit(nxt).netloc != urllib.parse.urlsplit(url).netloc and not _is_hub_host(nxt):
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            url = nxt
        raise UsageError(f"too many redirects for {self.url}", hint="check the URL")

    def _open(self, want: int) -> None:
        end = self._pos + max(want, self._chunk) - 1
        self._chunk *= 2
        resp = self._get(f"bytes={self._pos}-{end}")
        if resp.status_code == 416:  # asked past the end: the file ended
            resp.close()
            self._resp, self._eof = None, True
            return
        if resp.status_code >= 400:
            resp.close()
            if resp.headers.get("X-Error-Code") == "GatedRepo":  # the hub says why (huggingface_hub utils/_http.py)
                raise UsageError(f"HTTP {resp.status_code}: {self.url} is in a gated repo: accept its terms on the "
                                 "model page, then authenticate",
                                 hint="log in with `hf auth login` or set HF_TOKEN to a token with access")
            hint = "gated or private models need HF_TOKEN set" if resp.status_code in (401, 403) else "check the URL"
            raise UsageError(f"HTTP {resp.status_code} {resp.reason_phrase} for {self.url}", hint=hint)
        if resp.status_code == 206:
            m = re.match(r"bytes (\d+)-(\d+)/(\d+|\*)", resp.headers.get("Content-Range", ""))
            if not m or int(m.group(1)) != self._pos:
                resp.close()
                raise FormatError(f"{self.url}: the server answered a range request with the wrong range",
                                  hint="download the file and pass its local path")
            if m.group(3) != "*":
                self.file_size = int(m.group(3))
            self._resp_left = int(m.group(2)) - int(m.group(1)) + 1
        else:
            # Range ignored: this one response is the whole file from byte 0. Only valid at the start.
            if self._pos != 0:
                resp.close()
                raise FormatError(f"{self.url}: the server stopped honouring range requests",
                                  hint="download the file and pass its local path")
            length = resp.headers.get("Content-Length")
            self.file_size = int(length) if length and length.isdigit() else None
            self._resp_left = -1
        self._resp, self._body, self._pending = resp, resp.iter_raw(_READ_BLOCK), b""

    def _block(self, want: int) -> bytes:
        """Up to `want` bytes of the open response; b"" at its end."""
        import httpx2

        if not self._pending:
            self._remaining()
            try:
                self._pending = next(self._body, b"")
            except (httpx2.TransportError, OSError) as e:
                raise FormatError(f"reading {self.url} failed: {type(e).__name__} {e}".strip(),
                                  hint="try again, or download the file") from None
        block, self._pending = self._pending[:want], self._pending[want:]
        return block

    def _finish_response(self) -> None:
        self._resp.close()
        self._resp, self._body, self._pending = None, None, b""

    def read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n and not self._eof:
            if self._resp is None:
                self._open(n - len(out))
                if self._resp is None:
                    break
            want = n - len(out) if self._resp_left < 0 else min(n - len(out), self._resp_left)
            block = self._block(want)
            if not block:  # end of this response
                unbounded = self._resp_left < 0
                self._finish_response()
                # a 200 response that ended is the end of the file; a 206 one ended early
                self._eof = unbounded or self._resp_left > 0
                continue
            out += block
            self._pos += len(block)
            if self._resp_left > 0:
                self._resp_left -= len(block)
                if self._resp_left == 0:
                    self._finish_response()
                    self._eof = self.file_size is not None and self._pos >= self.file_size
        return bytes(out)

    @property
    def requests(self) -> int:
        """How many HTTP requests were made (tests check that a header costs few)."""
        return self._requests

    def close(self) -> None:
        if self._resp is not None:
            self._finish_response()


def open_source(source: str | os.PathLike, timeout_s: float = 30.0) -> FileSource | URLSource:
    """A local path or an http(s) URL as a sequential byte source; a missing path is a UsageError."""
    text = os.fspath(source)
    if is_url(text):
        return URLSource(text, timeout_s)
    if not os.path.exists(text):
        raise UsageError(f"no such file: {text}", hint="check the path, or pass a catalogue name or URL")
    if os.path.isdir(text):
        raise UsageError(f"{text} is a directory, not a GGUF file", hint="pass the .gguf file inside it")
    return FileSource(text)

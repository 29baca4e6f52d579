"""Hostile route handlers for `TLSSite`: each misbehaves in one way a fetcher must survive.

Every factory returns a handler `(BaseHTTPRequestHandler) -> None` to pass to
`TLSSite.add(path, handler)`. Handlers stop quietly when the client hangs up, and every
endless one also stops after `SAFETY_SECONDS`, so a broken fetcher cannot wedge a test run.

    site.add("/bomb", compression_bomb("gzip", 200 * 1024 * 1024))
    site.add("/slow", trickle(b"<p>hi</p>" * 100, interval=0.2))
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from functools import cache
from http.server import BaseHTTPRequestHandler

import brotli

from tests.support.tls_site import Page, send

Handler = Callable[[BaseHTTPRequestHandler], None]

#: Longest any endless handler keeps going, in seconds.
SAFETY_SECONDS = 60.0
_HANGUP = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError)


def _headers(
    handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str] | list[tuple[str, str]]
) -> None:
    handler.send_response(status)
    for name, value in headers.items() if isinstance(headers, dict) else headers:
        handler.send_header(name, value)
    handler.end_headers()


def trickle(
    body: bytes, interval: float = 0.2, step: int = 1, content_type: str = "text/html"
) -> Handler:
    """Announce the whole body, then send `step` bytes every `interval` seconds (drip-feed)."""

    def handle(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        headers = {"Content-Type": content_type, "Content-Length": str(len(body))}
        try:
            _headers(handler, 200, headers)
            for start in range(0, len(body), step):
                handler.wfile.write(body[start : start + step])
                handler.wfile.flush()
                time.sleep(interval)
        except _HANGUP:
            return

    return handle


def stall(before_headers: bool = True, seconds: float = SAFETY_SECONDS) -> Handler:
    """Say nothing (or only the headers) for `seconds`: a read must time out."""

    def handle(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        try:
            if not before_headers:
                _headers(handler, 200, {"Content-Type": "text/html", "Content-Length": "100"})
                handler.wfile.flush()
            time.sleep(seconds)
        except _HANGUP:
            return

    return handle


def endless_chunked(
    chunk: bytes = b"<p>" + b"a" * (64 * 1024 - 3), interval: float = 0.0
) -> Handler:
    """A chunked body that never ends (stops only on hang-up or after SAFETY_SECONDS).

    The default chunk is large: each TLS record is read with the interpreter lock let go and
    taken back, so in a busy worker a body of small records can outlast the tests' fetch deadline
    before it reaches the byte bound (docs/execution-model.md, "The interpreter's switch
    interval").
    """

    def handle(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        give_up = time.monotonic() + SAFETY_SECONDS
        try:
            _headers(handler, 200, {"Content-Type": "text/html", "Transfer-Encoding": "chunked"})
            frame = b"%x\r\n%s\r\n" % (len(chunk), chunk)
            while time.monotonic() < give_up:
                handler.wfile.write(frame)
                if interval:
                    handler.wfile.flush()
                    time.sleep(interval)
        except _HANGUP:
            return

    return handle


@cache
def bomb_bytes(encoding: str, decoded_size: int) -> bytes:
    """`decoded_size` bytes of one repeated letter, compressed with gzip, deflate or br (cached)."""
    block = b"<p>" + b"a" * (1024 * 1024 - 3)
    if encoding == "br":
        compressor = brotli.Compressor(quality=5)
        parts = [compressor.process(block) for _ in range(decoded_size // len(block))]
        return b"".join(parts) + compressor.finish()
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    zcompressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    parts = [zcompressor.compress(block) for _ in range(decoded_size // len(block))]
    return b"".join(parts) + zcompressor.flush()


def compression_bomb(
    encoding: str = "gzip", decoded_size: int = 256 * 1024 * 1024, content_type: str = "text/html"
) -> Handler:
    """A small body that decompresses to `decoded_size` bytes (gzip, deflate or br)."""
    payload = bomb_bytes(encoding, decoded_size)

    def handle(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        headers = {
            "Content-Type": content_type,
            "Content-Encoding": encoding,
            "Content-Length": str(len(payload)),
        }
        try:
            _headers(handler, 200, headers)
            handler.wfile.write(payload)
        except _HANGUP:
            return

    return handle


def encoded(body: bytes, encoding: str, content_type: str = "text/html; charset=utf-8") -> Page:
    """An honest page compressed with gzip, deflate (zlib), raw deflate or br."""
    if encoding == "br":
        data = brotli.compress(body)
    elif encoding == "raw-deflate":
        compressor = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        data, encoding = compressor.compress(body) + compressor.flush(), "deflate"
    else:
        wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
        data = compressor.compress(body) + compressor.flush()
    return Page(data, content_type, headers={"Content-Encoding": encoding})


def redirect(location: str, status: int = 302) -> Page:
    """A redirect to `location` (absolute or relative)."""
    return Page(b"", "text/plain", status, {"Location": location})


def redirect_chain(site: object, prefix: str, hops: int, final: Page) -> str:
    """Register `prefix/0 → prefix/1 → … → prefix/hops` (final page); return the first URL."""
    add = site.add  # type: ignore[attr-defined]
    for index in range(hops):
        add(f"{prefix}/{index}", redirect(f"{prefix}/{index + 1}", 301 + index % 2))
    add(f"{prefix}/{hops}", final)
    return site.url(f"{prefix}/0")  # type: ignore[attr-defined]


def redirect_loop(site: object, prefix: str) -> str:
    """Register `prefix/a ↔ prefix/b`; return the first URL."""
    site.add(f"{prefix}/a", redirect(f"{prefix}/b"))  # type: ignore[attr-defined]
    site.add(f"{prefix}/b", redirect(f"{prefix}/a"))  # type: ignore[attr-defined]
    return site.url(f"{prefix}/a")  # type: ignore[attr-defined]


def huge_headers(total_bytes: int = 256 * 1024) -> Handler:
    """One response whose header block is `total_bytes` long."""

    def handle(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        filler = [(f"X-Filler-{i}", "v" * 1000) for i in range(total_bytes // 1000)]
        try:
            _headers(
                handler, 200, [("Content-Type", "text/html"), ("Content-Length", "0")] + filler
            )
        except _HANGUP:
            return

    return handle


def many_headers(count: int = 1000) -> Handler:
    """A response with `count` small headers (small in bytes, large in number)."""

    def handle(handler: BaseHTTPRequestHandler) -> None:
        handler.close_connection = True
        headers = [("Content-Type", "text/html"), ("Content-Length", "2")]
        headers += [(f"X-{i}", "1") for i in range(count)]
        try:
            _headers(handler, 200, headers)
            handler.wfile.write(b"hi")
        except _HANGUP:
            return

    return handle


def rate_limited(retry_after: str | None = "120") -> Page:
    """A 429 with the given Retry-After (None: no header)."""
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    return Page(b"slow down", "text/plain", 429, headers)


BINARY_SAMPLES: dict[str, bytes] = {
    "png": b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(64),
    "pdf": b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n",
    "zip": b"PK\x03\x04\x14\x00\x00\x00\x08\x00" + bytes(40),
    "gzip": zlib.compress(b"x") and b"\x1f\x8b\x08\x00" + bytes(20),
    "nul": b"<html><body>\x00\x01\x02 binary garbage</body></html>",
}


def binary_as(kind: str = "png", content_type: str = "text/html; charset=utf-8") -> Page:
    """A binary body (PNG, PDF, ZIP, gzip or NUL-laden) that claims to be text."""
    return Page(BINARY_SAMPLES[kind], content_type)


def serve(handler: BaseHTTPRequestHandler, page: Page) -> None:
    """Send a canned page from inside a custom handler."""
    send(handler, page)


class LoopbackOnlyDialer:
    """An httpcore backend for tests: records every dial and refuses anything off loopback."""

    def __init__(self) -> None:
        import httpcore

        self._inner = httpcore.SyncBackend()
        self.dialled: list[tuple[str, int]] = []

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: object = None,
    ) -> object:
        import ipaddress

        import httpcore

        self.dialled.append((host, port))
        if not ipaddress.ip_address(host).is_loopback:
            raise httpcore.ConnectError(f"test dialer refuses non-loopback {host}")
        return self._inner.connect_tcp(host, port, timeout, local_address, socket_options)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def static_resolver(table: dict[str, list[str]]) -> Callable[[str, int], list[str]]:
    """A resolver over a fixed table; unknown names fail like a DNS miss."""
    import socket

    def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, f"unknown test host {host}")
        return list(table[host])

    return resolve


#: Names tests resolve: only site.test reaches the (allow-listed) site.
TEST_HOSTS: dict[str, list[str]] = {
    "site.test": ["127.0.0.1"],
    "other.test": ["127.0.0.1"],
    "evil.test": ["127.0.0.2"],
    "localhost": ["::1"],
    "six.test": ["::1"],
    "private.test": ["10.0.0.1"],
    "metadata.test": ["169.254.169.254"],
    "mixed.test": ["127.0.0.1", "10.0.0.1"],
    "mapped.test": ["::ffff:127.0.0.1"],
}


#: The only network tests may reach (the TLSSite binds 127.0.0.1).
TEST_ALLOW_CIDRS = ["127.0.0.1/32"]
#: Database of the session's redis-server reserved for the fetch tests (flushed by them; the
#: session's broker and worker use database 0).
TEST_REDIS_DB = 15


def private_redis_url(db: int = TEST_REDIS_DB) -> str:
    """A database on this session's own redis-server, never the machine's shared one: two test
    runs on one machine must not flush or read each other's politeness state."""
    from tests.conftest import ENV

    return f"redis://127.0.0.1:{ENV.redis.port}/{db}"


def fetch_settings(ports: list[int], **overrides: object) -> object:
    """Settings for fetch tests: only 127.0.0.1 allowed, short bounds, robots off, private Redis."""
    from worker.platform.settings import Settings

    values: dict[str, object] = {
        "egress_allow_cidrs": TEST_ALLOW_CIDRS,
        "fetch_allowed_ports": ports,
        "robots_txt": False,
        "redis_url": private_redis_url(),
        "fetch_connect_timeout_seconds": 2.0,
        "fetch_read_timeout_seconds": 2.0,
        "fetch_total_timeout_seconds": 5.0,
        "fetch_max_bytes": 64 * 1024,
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]

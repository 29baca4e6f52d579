"""A real HTTPS site on loopback, with certificates from trustme, for tests and benchmarks.

Routes are plain functions of the request handler, so a test can serve a normal page, a slow
trickle, a decompression bomb or a hostile redirect with the same server.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import trustme

Handler = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Page:
    """A canned response."""

    body: bytes
    content_type: str = "text/html; charset=utf-8"
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def send(handler: BaseHTTPRequestHandler, page: Page) -> None:
    """Write `page` as a complete response."""
    handler.send_response(page.status)
    if page.content_type:
        handler.send_header("Content-Type", page.content_type)
    handler.send_header("Content-Length", str(len(page.body)))
    for name, value in page.headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(page.body)


class _RequestHandler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _dispatch(self) -> None:
        site = self.server.site
        path = urlsplit(self.path).path
        site.record(path)
        route = site.routes.get(path)
        if route is None:
            send(self, Page(b"not found", "text/plain", 404))
            return
        if isinstance(route, Page):
            delay = site.delay_seconds
            if delay:
                time.sleep(delay)
            send(self, route)
        else:
            route(self)

    do_GET = _dispatch
    do_HEAD = _dispatch
    do_POST = _dispatch

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        """Stay quiet: tests read outcomes, not access logs."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128
    site: TLSSite
    context: ssl.SSLContext
    open_sockets: set[ssl.SSLSocket]

    def finish_request(self, request, client_address):  # type: ignore[no-untyped-def]
        """Do the TLS handshake in the request's own thread, so one slow client blocks nobody."""
        request.settimeout(30)
        try:
            tls = self.context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        # The wrapped socket took over the descriptor (the original is detached, so the
        # server's own shutdown_request closes nothing): close the TLS socket here.
        self.open_sockets.add(tls)
        try:
            super().finish_request(tls, client_address)
        finally:
            self.open_sockets.discard(tls)
            self.shutdown_request(tls)

    def close_open_sockets(self) -> None:
        """End kept-alive connections too: a stopped site must refuse its clients' next request."""
        for sock in list(self.open_sockets):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class TLSSite:
    """An HTTPS server on `host` (default 127.0.0.1) with a trustme CA; use as a context manager."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        names: tuple[str, ...] = ("127.0.0.1", "localhost", "site.test"),
        ca: trustme.CA | None = None,
        port: int = 0,
    ) -> None:
        self.host = host
        #: The port to bind (0: any free one); a restarted site binds the port it had.
        self._port = port
        self.ca = ca or trustme.CA()
        self.cert = self.ca.issue_cert(*names)
        self.routes: dict[str, Page | Handler] = {}
        self.hits: dict[str, int] = {}
        self.delay_seconds = 0.0
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # Routes.
    def add(self, path: str, route: Page | Handler) -> str:
        """Serve `route` at `path`; return its URL."""
        self.routes[path] = route
        return self.url(path)

    def page(
        self,
        path: str,
        body: str | bytes,
        content_type: str = "text/html; charset=utf-8",
        status: int = 200,
        headers: dict[str, str] | None = None,
    ) -> str:
        """Serve a canned page at `path`; return its URL."""
        data = body.encode() if isinstance(body, str) else body
        return self.add(path, Page(data, content_type, status, dict(headers or {})))

    def record(self, path: str) -> None:
        with self._lock:
            self.hits[path] = self.hits.get(path, 0) + 1

    # Addresses.
    @property
    def port(self) -> int:
        assert self._server is not None, "site not started"
        return int(self._server.server_address[1])

    def url(self, path: str, host: str | None = None) -> str:
        return f"https://{host or self.host}:{self.port}{path}" if self._server else path

    def write_ca(self, path: Path) -> Path:
        """Write the CA certificate (PEM) that clients must trust."""
        self.ca.cert_pem.write_to_path(str(path))
        return path

    # Lifecycle.
    def start(self) -> TLSSite:
        server = _Server((self.host, self._port), _RequestHandler)
        self._port = int(server.server_address[1])
        server.site = self
        server.open_sockets = set()
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.cert.configure_cert(context)
        server.context = context
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_open_sockets()
            self._server = None

    def __enter__(self) -> TLSSite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

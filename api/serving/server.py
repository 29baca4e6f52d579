"""How `evidence api` and `evidence mcp --transport http` serve: uvicorn, bounded in what it takes.

uvicorn alone never times out a connection that is still sending its request: 1 100 connections
that sent half a header each held a descriptor apiece until a 1 024-descriptor process could
accept nothing more. Here (per process):

* a connection has EVIDENCE_HTTP_HEADER_TIMEOUT_SECONDS to send a request's line and headers
  (from its opening, or from the end of its previous response), and
  EVIDENCE_HTTP_BODY_TIMEOUT_SECONDS for the body after them; then it is closed;
* a request line plus headers over EVIDENCE_HTTP_MAX_HEADER_BYTES is answered 431;
* past EVIDENCE_HTTP_LIMIT_CONCURRENCY open connections or running requests, new requests are
  answered 503 by uvicorn; at that limit plus HEADROOM open connections, each new connection
  closes the one that has waited longest for its headers (or itself, when none waits), so a
  flood of idle connections can neither exhaust descriptors nor lock new clients out;
* the descriptor limit is raised to fit, or the concurrency limit lowered to fit it.

A reverse proxy in front (deploy/nginx.conf) is the first line; these bounds hold without one.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
from dataclasses import dataclass
from typing import Any

import structlog
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.errors import envelope
from worker.platform.settings import Settings, get_settings

log = structlog.get_logger(__name__)

#: Connections let in over the concurrency limit, so their requests can be answered 503.
HEADROOM = 64
#: Descriptors kept for everything but client connections: database and Redis pools, image
#: fetches, DNS threads, logs, the listening socket.
FD_RESERVE = 128


@dataclass(frozen=True)
class Limits:
    """What one serving process accepts."""

    concurrency: int
    #: The soft descriptor limit to set before serving (None: the current one fits).
    raise_nofile_to: int | None = None

    @property
    def max_connections(self) -> int:
        return self.concurrency + HEADROOM


def plan_limits(configured: int, nofile: tuple[int, int]) -> Limits:
    """The concurrency limit to serve with under the descriptor limits (soft, hard)."""
    soft, hard = nofile
    wanted = configured + HEADROOM + FD_RESERVE
    ceiling = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    raise_to = ceiling if soft < ceiling else None
    usable = max(soft, ceiling)
    return Limits(max(1, min(configured, usable - FD_RESERVE - HEADROOM)), raise_to)


def prepare(settings: Settings) -> Limits:
    """Plan the limits and raise this process's descriptor limit (children inherit it)."""
    limits = plan_limits(
        settings.http_limit_concurrency, resource.getrlimit(resource.RLIMIT_NOFILE)
    )
    if limits.raise_nofile_to is not None:
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.raise_nofile_to, hard))
    if limits.concurrency < settings.http_limit_concurrency:
        log.warning(
            "concurrency_limit_lowered",
            configured=settings.http_limit_concurrency,
            serving=limits.concurrency,
            reason="the descriptor limit (ulimit -n) is too low for it",
        )
    return limits


def uvicorn_options(settings: Settings, limits: Limits) -> dict[str, Any]:
    """Keyword arguments for `uvicorn.run` that bound connections and requests."""
    return {
        "http": BoundedHttpToolsProtocol,
        "limit_concurrency": limits.concurrency,
        "timeout_keep_alive": settings.http_keepalive_seconds,
        # Only read by uvicorn's h11 protocol; BoundedHttpToolsProtocol applies the same bound.
        "h11_max_incomplete_event_size": settings.http_max_header_bytes,
    }


def run(app: Any, **options: Any) -> None:
    """`uvicorn.run(app, ...)` with the bounds above; several processes each accept on a
    listening socket of their own (`ReusePortSocket`)."""
    import uvicorn

    settings = get_settings()
    options = {**options, **uvicorn_options(settings, prepare(settings))}
    if options.get("workers", 1) <= 1:
        uvicorn.run(app, **options)
        return
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config(app, **options)
    Multiprocess(config, sockets=[ReusePortSocket.bound(config.host, config.port)]).run()


def _reuse_port_socket(family: int, address: tuple[Any, ...]) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    sock.set_inheritable(True)
    return sock


class ReusePortSocket(socket.socket):
    """A bound socket that each uvicorn worker process receives as a new socket of its own,
    bound to the same address with SO_REUSEPORT.

    uvicorn's processes share one listening socket, and a process that wakes first accepts
    every connection waiting: a client's keep-alive pool, opened at once, lands mostly on one
    process, which then does most of the work on its one CPU while the other idles
    (docs/execution-model.md). With a listening socket per process the kernel spreads new
    connections over them by their addresses' hash. The parent only binds this
    one (so a port in use fails at start) and never listens on it; uvicorn hands the sockets
    to its processes by pickling them, which is where each makes its own.
    """

    @classmethod
    def bound(cls, host: str, port: int) -> ReusePortSocket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        probe = _reuse_port_socket(family, (host, port))
        sock = cls(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, fileno=probe.detach())
        sock.set_inheritable(True)
        return sock

    def __reduce__(self) -> tuple[Any, ...]:
        return _reuse_port_socket, (self.family, self.getsockname())


class HeadersTooLarge(Exception):
    """The request line and headers passed EVIDENCE_HTTP_MAX_HEADER_BYTES."""


#: Connections waiting for a request's headers, the longest-waiting first (one loop per process).
_waiting: dict[BoundedHttpToolsProtocol, None] = {}


def _raw_response(status: int, reason: str, message: str) -> bytes:
    body = json.dumps(envelope("invalid_input", message)).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body deadlines, a header bound, and room
    made at the connection cap by closing the connection that has waited longest."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()
        self.header_timeout = settings.http_header_timeout_seconds
        self.body_timeout = settings.http_body_timeout_seconds
        self.max_header_bytes = settings.http_max_header_bytes
        limit = self.config.limit_concurrency
        self.max_connections = limit + HEADROOM if limit is not None else None
        self._deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        self._headers_too_large = False

    # Connections.
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        if self.max_connections is not None and len(self.connections) > self.max_connections:
            self._make_room()
        if not self.transport.is_closing():
            self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        _waiting.pop(self, None)
        self._set_deadline(None)
        super().connection_lost(exc)

    def _make_room(self) -> None:
        """Close the connection waiting longest for its headers; this one if none waits."""
        victim = next(iter(_waiting), self)
        _waiting.pop(victim, None)
        victim.transport.close()

    # Deadlines.
    def _set_deadline(self, seconds: float | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None if seconds is None else self.loop.call_later(seconds, self._expire)

    def _expire(self) -> None:
        self._deadline = None
        _waiting.pop(self, None)
        if not self.transport.is_closing():
            self.transport.close()

    def _await_headers(self) -> None:
        self._header_bytes = 0
        _waiting.pop(self, None)
        _waiting[self] = None
        self._set_deadline(self.header_timeout)

    # Parser callbacks.
    def _count(self, size: int) -> None:
        self._header_bytes += size
        if self._header_bytes > self.max_header_bytes:
            self._headers_too_large = True
            raise HeadersTooLarge

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        _waiting.pop(self, None)
        self._set_deadline(self.body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._set_deadline(None)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        pipelined = bool(self.pipeline)
        super().on_response_complete()
        if not pipelined and not self.transport.is_closing():
            self._await_headers()

    def send_400_response(self, msg: str) -> None:
        """Answer a request the parser refused in the envelope, then close."""
        if self._headers_too_large:
            limit = self.max_header_bytes
            answer = _raw_response(
                431,
                "Request Header Fields Too Large",
                f"the request line and headers are larger than {limit} bytes",
            )
        else:
            answer = _raw_response(400, "Bad Request", "the request is not valid HTTP/1.1")
        self.transport.write(answer)
        self.transport.close()

"""The network layer under httpx: every TCP connection dials only an address the guard accepted.

`GuardedBackend` is an httpcore network backend. httpcore asks it for a connection to
`(host, port)`; it resolves the host once, refuses the connection unless every address is
allowed, and dials the checked address itself, so no second lookup (DNS rebinding) can
change the target. TLS still uses the host name for SNI and certificate checks, because
httpcore passes the URL's host to `start_tls`. Streams also obey a per-fetch total deadline
(`deadline_scope`), so a drip-feeding server cannot outlive it.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from contextvars import ContextVar
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import brotli
import certifi
import httpcore
import httpx

from worker.fetch.guard import IPAddress, Network, check_addresses, parse_host_literal
from worker.fetch.guard import Verdict as _Verdict

Resolver = Callable[[str, int], list[str]]

#: Threads for DNS lookups (a lookup that hangs holds one until the system resolver gives up).
_RESOLVER_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="egress-dns")

_deadline: ContextVar[float | None] = ContextVar("fetch_deadline", default=None)


class EgressBlocked(Exception):
    """A connection the guard refused; it was never dialled."""


class ResolutionFailed(Exception):
    """The host name did not resolve."""


def system_resolver(host: str, port: int) -> list[str]:
    """Resolve with getaddrinfo (TCP), de-duplicated, in the resolver's order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolutionFailed(f"{host}: {exc}") from exc
    seen: dict[str, None] = {}
    for info in infos:
        seen.setdefault(str(info[4][0]), None)
    return list(seen)


@contextmanager
def deadline_scope(seconds: float) -> Iterator[float]:
    """Bound every socket operation inside the block to finish within `seconds` from now.

    A scope inside another never extends it: a fetch inside a retrieval's own deadline ends
    by whichever comes first.
    """
    deadline = time.monotonic() + seconds
    outer = _deadline.get()
    if outer is not None:
        deadline = min(deadline, outer)
    token = _deadline.set(deadline)
    try:
        yield deadline
    finally:
        _deadline.reset(token)


def remaining_seconds() -> float | None:
    """Seconds left before the current deadline (None outside any scope)."""
    deadline = _deadline.get()
    return None if deadline is None else deadline - time.monotonic()


def _bounded(timeout: float | None, exc: type[Exception]) -> float | None:
    """`timeout` clamped to the current deadline; raise `exc` when the deadline has passed."""
    left = remaining_seconds()
    if left is None:
        return timeout
    if left <= 0:
        raise exc("total fetch deadline exceeded")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation is cut at the fetch's total deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class GuardedBackend(httpcore.NetworkBackend):
    """Resolve once, check every address, dial only checked addresses (never a name)."""

    def __init__(
        self,
        allow_cidrs: Iterable[Network],
        allowed_ports: Iterable[int],
        resolver: Resolver | None = None,
        dialer: httpcore.NetworkBackend | None = None,
    ) -> None:
        self.allow_cidrs = tuple(allow_cidrs)
        self.allowed_ports = frozenset(allowed_ports)
        self.resolver = resolver or system_resolver
        self.dialer = dialer or httpcore.SyncBackend()

    def _resolve(self, host: str, port: int, timeout: float | None) -> list[str]:
        """Run the resolver in a helper thread so a hung DNS lookup obeys the connect bound."""
        future = _RESOLVER_POOL.submit(self.resolver, host, port)
        try:
            return future.result(timeout=_bounded(timeout, httpcore.ConnectTimeout))
        except FutureTimeout as exc:
            raise httpcore.ConnectTimeout(f"DNS lookup of {host} timed out") from exc

    def checked_addresses(self, host: str, port: int, timeout: float | None = None) -> list[str]:
        """The addresses to dial for `host`, or EgressBlocked / ResolutionFailed."""
        if port not in self.allowed_ports:
            raise EgressBlocked(f"port not allowed: {port}")
        literal = parse_host_literal(host)
        if isinstance(literal, _Verdict):
            raise EgressBlocked(literal.reason)
        addresses: list[str] | list[IPAddress]
        try:
            addresses = [literal] if literal is not None else self._resolve(host, port, timeout)
        except OSError as exc:
            raise ResolutionFailed(f"{host}: {exc}") from exc
        verdict = check_addresses(addresses, self.allow_cidrs)
        if not verdict.allowed:
            raise EgressBlocked(f"{host}: {verdict.reason}")
        return [str(address) for address in addresses]

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        addresses = self.checked_addresses(host, port, timeout)
        failure: Exception | None = None
        for address in addresses:
            try:
                stream = self.dialer.connect_tcp(
                    address,
                    port,
                    timeout=_bounded(timeout, httpcore.ConnectTimeout),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
                continue
            return DeadlineStream(stream)
        assert failure is not None
        raise failure

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise EgressBlocked("unix sockets are never dialled")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _ResponseStream(httpx.SyncByteStream):
    """httpcore's response body as an httpx stream; `done` runs once when it is closed."""

    def __init__(self, stream: Iterable[bytes], done: Callable[[], None]) -> None:
        self._stream = stream
        self._done: Callable[[], None] | None = done

    def __iter__(self) -> Iterator[bytes]:
        yield from self._stream

    def close(self) -> None:
        try:
            close = getattr(self._stream, "close", None)
            if close is not None:
                close()
        finally:
            done, self._done = self._done, None
            if done is not None:
                done()


Origin = tuple[bytes, bytes, int | None]
#: Origins whose pools are kept while idle, at most; past it the least recently used idle one
#: is closed when a new origin comes (a batch over thousands of hosts would otherwise keep a
#: socket open for each of them for the whole keep-alive expiry).
MAX_IDLE_ORIGINS = 64


class _OriginPool:
    """One origin's connection pool, with the requests it serves now and when it last did."""

    __slots__ = ("pool", "in_use", "used_at")

    def __init__(self, pool: httpcore.ConnectionPool) -> None:
        self.pool = pool
        self.in_use = 0
        self.used_at = time.monotonic()


class GuardedTransport(httpx.BaseTransport):
    """An httpx transport over one httpcore connection pool per origin, all dialling through
    `GuardedBackend`.

    httpcore's pool scans every connection it holds, once per connection, each time a request
    starts or ends (encode/httpcore#1035): with one pool for 128 keep-alive connections over
    16 hosts that was several milliseconds of interpreter time per fetch, under the pool's
    lock. A pool per origin holds at most that host's share (the politeness limit bounds the
    fetches of one host at once), so the scan is over a handful. A pool that served nothing
    for its keep-alive expiry is closed, and so is the least recently used idle one when more
    than `MAX_IDLE_ORIGINS` would be kept: a batch over thousands of hosts keeps few sockets.
    """

    def __init__(self, make_pool: Callable[[], httpcore.ConnectionPool], idle_seconds: float):
        self._make_pool = make_pool
        self._idle_seconds = idle_seconds
        self._max_idle_origins = MAX_IDLE_ORIGINS
        self._pools: dict[Origin, _OriginPool] = {}
        self._lock = threading.Lock()
        self._pruned_at = time.monotonic()
        self._closed = False

    @property
    def connections(self) -> list[httpcore.ConnectionInterface]:
        """Every pooled connection, across origins."""
        with self._lock:
            pools = [entry.pool for entry in self._pools.values()]
        return [c for pool in pools for c in pool.connections]

    def _checkout(self, origin: Origin) -> _OriginPool:
        now = time.monotonic()
        with self._lock:
            if self._closed:
                raise RuntimeError("the transport is closed")
            entry = self._pools.get(origin)
            closing: list[httpcore.ConnectionPool] = []
            if entry is None:
                closing = self._least_recently_used()
                entry = self._pools[origin] = _OriginPool(self._make_pool())
            entry.in_use += 1  # in use now: the expiry pass below leaves it
            entry.used_at = now
            if now - self._pruned_at >= self._idle_seconds:
                closing += self._idle_pools(now)
        for pool in closing:
            pool.close()
        return entry

    def _idle_pools(self, now: float) -> list[httpcore.ConnectionPool]:
        """Pools with nothing in flight and unused for the keep-alive expiry, taken out."""
        self._pruned_at = now
        stale = [
            origin
            for origin, entry in self._pools.items()
            if entry.in_use == 0 and now - entry.used_at >= self._idle_seconds
        ]
        return [self._pools.pop(origin).pool for origin in stale]

    def _least_recently_used(self) -> list[httpcore.ConnectionPool]:
        """Idle pools beyond the most that may be kept, least recently used first, taken out."""
        idle = [(e.used_at, o) for o, e in self._pools.items() if e.in_use == 0]
        surplus = len(idle) + 1 - self._max_idle_origins  # the new origin will count too
        if surplus <= 0:
            return []
        return [self._pools.pop(origin).pool for _, origin in sorted(idle)[:surplus]]

    def _checkin(self, entry: _OriginPool) -> None:
        with self._lock:
            entry.in_use -= 1
            entry.used_at = time.monotonic()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        url = httpcore.URL(
            scheme=request.url.raw_scheme,
            host=request.url.raw_host,
            port=request.url.port,
            target=request.url.raw_path,
        )
        core_request = httpcore.Request(
            method=request.method,
            url=url,
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        entry = self._checkout((url.scheme, url.host, url.port))
        try:
            response = entry.pool.handle_request(core_request)
        except BaseException:
            self._checkin(entry)
            raise
        assert isinstance(response.stream, Iterable)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream, lambda: self._checkin(entry)),
            extensions=response.extensions,
        )

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pools, self._pools = [e.pool for e in self._pools.values()], {}
        for pool in pools:
            pool.close()


class BodyDecoder:
    """Undo one Content-Encoding, never producing more than the caller's room (bomb-safe)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._pending = b""
        self._zlib: zlib._Decompress | None = None
        self._brotli: Any = None
        if encoding == "gzip":
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "br":
            self._brotli = brotli.Decompressor()
        elif encoding not in ("identity", "deflate"):
            raise ValueError(f"unsupported content-encoding: {encoding!r}")

    def feed(self, data: bytes, room: int) -> bytes:
        """Decode `data`; return at most `room` bytes (the rest is never produced)."""
        if self.encoding == "identity":
            return data[:room]
        if self._brotli is not None:
            out: bytes = self._brotli.process(data, output_buffer_limit=room)
            while len(out) < room and not self._brotli.can_accept_more_data():
                out += self._brotli.process(b"", output_buffer_limit=room - len(out))
            return out[:room]
        if self._zlib is None:
            self._pending += data
            if len(self._pending) < 2:
                return b""
            cmf, flg = self._pending[0], self._pending[1]
            wrapped = cmf & 0x0F == 8 and (cmf * 256 + flg) % 31 == 0
            self._zlib = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
            data, self._pending = self._pending, b""
        return self._zlib.decompress(self._zlib.unconsumed_tail + data, room)

    def flush(self, room: int) -> bytes:
        """Whatever the decoder still holds, at most `room` bytes."""
        if self._zlib is not None and room > 0:
            return self._zlib.decompress(self._zlib.unconsumed_tail, room)
        return b""


def make_decoder(content_encoding: str | None) -> BodyDecoder:
    """A decoder for a Content-Encoding header (one coding; raises ValueError otherwise)."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if len(codings) > 1:
        raise ValueError(f"stacked content-encodings are not supported: {content_encoding!r}")
    coding = codings[0] if codings else "identity"
    return BodyDecoder({"x-gzip": "gzip"}.get(coding, coding))


def tls_context(ca_bundle: str | None) -> ssl.SSLContext:
    """A verifying TLS context (public roots, plus `ca_bundle` if given); never unverified."""
    context = ssl.create_default_context(cafile=certifi.where())
    if ca_bundle:
        context.load_verify_locations(cafile=ca_bundle)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def guarded_client(
    backend: httpcore.NetworkBackend,
    *,
    ca_bundle: str | None,
    read_timeout: float,
    connect_timeout: float,
    headers: dict[str, str],
    max_keepalive: int,
    keepalive_expiry: float,
    max_connections: int | None = None,
) -> httpx.Client:
    """The one way the service talks to the outside world: an HTTP/1.1 client that dials only
    through `backend` (a `GuardedBackend`: checked addresses), verifies TLS, follows no
    redirect by itself (the caller checks each hop) and ignores the environment's proxies and
    certificates, and keeps no cookie. Connections are pooled per origin, `max_keepalive`
    idle ones (and at most `max_connections`, when given) per origin; what calls it bounds
    the rest."""
    context = tls_context(ca_bundle)

    def make_pool() -> httpcore.ConnectionPool:
        return httpcore.ConnectionPool(
            ssl_context=context,
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive,
            keepalive_expiry=keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=backend,
        )

    return httpx.Client(
        transport=GuardedTransport(make_pool, keepalive_expiry),
        # One client serves every workspace: a cookie one fetch was given must never ride on
        # another's request (nor be kept at all: evidence is what an anonymous visitor sees).
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        timeout=httpx.Timeout(read_timeout, connect=connect_timeout, pool=connect_timeout),
        headers=headers,
        follow_redirects=False,
        trust_env=False,
    )

"""A lean HTTP/1.1 client for the load bench: keep-alive connections, one request at a time on
each, answers parsed by httptools (the parser uvicorn uses), requests written as prepared bytes.

The load client shares the machine's two cores with the service it measures, and every
millisecond of CPU it spends is taken from the API, or shows up as its own lag inside the
latencies it times. A general client (aiohttp) spent about 0.8 ms of CPU a request here;
this one does the least a request needs: one write, one parse, one future.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import cast

import httptools


class HttpError(Exception):
    """The request did not get a whole answer: the connection failed, closed or timed out.
    `kind` names the failure without its details, for counting."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    retry_after: str | None


class _Connection(asyncio.Protocol):
    """One keep-alive connection; `send` writes a request and waits for its whole answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._body: list[bytes] = []
        self._retry_after: str | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HttpError("unparsable answer", str(exc)))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(HttpError("connection closed", str(exc or "by the server")))

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._body, self._retry_after = [], None

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"retry-after":
            self._retry_after = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        keep_alive = self._parser.should_keep_alive()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            status = self._parser.get_status_code()
            waiter.set_result(Answer(status, b"".join(self._body), self._retry_after))
        if not keep_alive:
            self.close()

    def _fail(self, error: HttpError) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(error)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    async def send(self, request: bytes, timeout: float) -> Answer:
        if self.closed or self.transport is None:
            raise HttpError("connection closed")
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        self.transport.write(request)
        timer = loop.call_later(timeout, self._fail, HttpError("no answer", f"in {timeout} s"))
        try:
            return await waiter
        finally:
            timer.cancel()


class Pool:
    """Up to `size` connections to one host; the most recently used is reused first, so a few
    stay warm and the idle rest may expire on the server without being picked."""

    def __init__(self, host: str, port: int, size: int, headers: dict[str, str]) -> None:
        self._host, self._port = host, port
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(size)  # a request holds one from acquire to release
        self._size = size
        fixed = "".join(f"{k}: {v}\r\n" for k, v in ({"Host": f"{host}:{port}"} | headers).items())
        self._fixed = fixed.encode("latin-1")

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(_Connection, self._host, self._port)
        return connection

    async def fill(self, path: str) -> None:
        """Open every connection now with a request for `path` on each, as a long-running
        client would have them (a server may close a connection that sends nothing)."""
        connections = await asyncio.gather(*(self._connect() for _ in range(self._size)))
        await asyncio.gather(*(c.send(self._head("GET", path) + b"\r\n", 30) for c in connections))
        self._idle.extend(connections)

    def _head(self, method: str, path: str) -> bytes:
        return f"{method} {path} HTTP/1.1\r\n".encode("latin-1") + self._fixed

    async def _acquire(self) -> tuple[_Connection | None, float]:
        """A live idle connection (None: open a new one), and the ms spent waiting for a slot."""
        waited_from = time.perf_counter() if self._slots.locked() else None
        await self._slots.acquire()
        while self._idle:
            connection = self._idle.pop()
            if not connection.closed:
                return connection, _since(waited_from)
        return None, _since(waited_from)

    def _release(self, connection: _Connection | None) -> None:
        if connection is not None and not connection.closed:
            self._idle.append(connection)
        self._slots.release()

    async def request(
        self, method: str, path: str, body: bytes = b"", timeout: float = 30.0
    ) -> tuple[Answer, float]:
        """Send one request; its answer, and the ms it waited for a pooled connection."""
        head = self._head(method, path)
        if body:
            head += b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
        connection, waited = await self._acquire()
        try:
            if connection is None:
                connection = await self._connect()
            answer = await connection.send(head + b"\r\n" + body, timeout)
        except OSError as exc:
            raise HttpError(type(exc).__name__, str(exc)) from exc
        finally:
            self._release(connection)
        return answer, waited

    def close(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()


def _since(started: float | None) -> float:
    return 0.0 if started is None else (time.perf_counter() - started) * 1000

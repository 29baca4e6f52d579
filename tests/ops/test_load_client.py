"""The load bench's HTTP client (`bench.lean_http`) against a real HTTP/1.1 server on loopback:
what it times must be whole answers, on reused connections, and failures must be errors."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.lean_http import HttpError, Pool


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless told otherwise

    def do_GET(self) -> None:
        self.server.connections.add(self.client_address)  # type: ignore[attr-defined]
        if self.path == "/silent":
            threading.Event().wait(2)
            return
        body = f"{self.path} {self.headers['Authorization']}".encode() * 500  # several reads
        self.send_response(429 if self.path == "/limited" else 200)
        if self.path == "/limited":
            self.send_header("Retry-After", "7")
        if self.path == "/close":
            self.send_header("Connection", "close")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(202)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    httpd.connections = set()  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _pool(server: ThreadingHTTPServer, size: int = 2) -> Pool:
    return Pool("127.0.0.1", server.server_address[1], size, {"Authorization": "Bearer k"})


def test_whole_answers_on_kept_connections(server: ThreadingHTTPServer) -> None:
    async def run() -> list[tuple[int, bytes, str | None]]:
        pool = _pool(server)
        await pool.fill("/warm")
        answers = []
        for path in ("/a", "/b", "/limited"):
            answer, waited = await pool.request("GET", path)
            assert waited == 0.0
            answers.append((answer.status, answer.body, answer.retry_after))
        posted, _ = await pool.request("POST", "/p", b'{"x": 1}')
        answers.append((posted.status, posted.body, posted.retry_after))
        pool.close()
        return answers

    answers = asyncio.run(run())
    assert answers[0] == (200, b"/a Bearer k" * 500, None)
    assert answers[1][1] == b"/b Bearer k" * 500
    assert answers[2][0] == 429 and answers[2][2] == "7"
    assert answers[3] == (202, b'{"x": 1}', None)
    assert len(server.connections) == 2  # type: ignore[attr-defined]  # the pool's two, reused


def test_a_closed_connection_is_replaced(server: ThreadingHTTPServer) -> None:
    async def run() -> list[int]:
        pool = _pool(server, size=1)
        statuses = [(await pool.request("GET", path))[0].status for path in ("/close", "/next")]
        pool.close()
        return statuses

    assert asyncio.run(run()) == [200, 200]
    assert len(server.connections) == 2  # type: ignore[attr-defined]


def test_no_answer_in_time_is_an_error(server: ThreadingHTTPServer) -> None:
    async def run() -> None:
        pool = _pool(server, size=1)
        try:
            with pytest.raises(HttpError, match="no answer") as failed:
                await pool.request("GET", "/silent", timeout=0.2)
            assert failed.value.kind == "no answer"  # what the bench counts errors by
            answer, _ = await pool.request("GET", "/after")  # a new connection
            assert answer.status == 200
        finally:
            pool.close()

    asyncio.run(run())


def test_a_waiting_request_gets_the_next_free_connection(server: ThreadingHTTPServer) -> None:
    async def run() -> list[float]:
        pool = _pool(server, size=1)
        results = await asyncio.gather(*(pool.request("GET", f"/{n}") for n in range(3)))
        pool.close()
        return [waited for _, waited in results]

    waits = asyncio.run(run())
    assert waits[0] == 0.0 and all(w > 0 for w in waits[1:])

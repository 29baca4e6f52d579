"""What `evidence api` accepts from connections: half-sent requests time out, a flood of them
neither exhausts descriptors nor locks others out, oversized headers are refused."""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from api.serving.server import FD_RESERVE, HEADROOM, plan_limits
from tests.conftest import Env
from tests.support.factories import make_key
from tests.support.served import port_of, raw_request, served_api, status_of
from tests.support.slowdown import scaled

#: The served process may hold this many descriptors; the flood opens more connections.
NOFILE = 256
FLOOD = 320
LIMIT = 20
HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
KEEPALIVE = 1
#: What a request may take while the flood is on (generous; the bug was forever).
PROMPT = scaled(2.0)
#: How late past its deadline the server may close a stale connection.
LATE = scaled(3.0)


class TestPlanLimits:
    """The concurrency limit fits the descriptor limit, raising it when allowed."""

    def test_fits(self) -> None:
        """With room, the configured limit stands and the descriptor limit is left alone."""
        limits = plan_limits(1000, (20_000, 20_000))
        assert (limits.concurrency, limits.raise_nofile_to) == (1000, None)
        assert limits.max_connections == 1000 + HEADROOM

    def test_raises_the_soft_limit(self) -> None:
        """A low soft limit is raised toward the hard one."""
        limits = plan_limits(1000, (1024, 524_288))
        assert (limits.concurrency, limits.raise_nofile_to) == (1000, 1000 + HEADROOM + FD_RESERVE)

    def test_lowers_the_limit_to_the_hard_limit(self) -> None:
        """When even the hard limit is too low, the concurrency limit gives way."""
        limits = plan_limits(1000, (1024, 1024))
        assert limits.raise_nofile_to is None
        assert limits.max_connections + FD_RESERVE == 1024

    def test_tiny_limits_still_serve(self) -> None:
        assert plan_limits(1000, (64, 64)).concurrency == 1


@pytest.fixture(scope="module")
def api_url(env: Env) -> Iterator[str]:
    settings = {
        "EVIDENCE_HTTP_LIMIT_CONCURRENCY": str(LIMIT),
        "EVIDENCE_HTTP_HEADER_TIMEOUT_SECONDS": str(HEADER_TIMEOUT),
        "EVIDENCE_HTTP_BODY_TIMEOUT_SECONDS": str(BODY_TIMEOUT),
        "EVIDENCE_HTTP_KEEPALIVE_SECONDS": str(KEEPALIVE),
        "EVIDENCE_HTTP_MAX_HEADER_BYTES": "8192",
    }
    with served_api(env.tmp / "api-served-limits.log", settings, nofile=NOFILE) as url:
        yield url


def half_sent(port: int) -> socket.socket:
    """A connection that sent part of a request's headers and then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    with contextlib.suppress(OSError):  # already closed to make room: that is allowed
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1")
    return sock


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes `sock` within `within` seconds (answered or not)."""
    deadline = time.monotonic() + within
    sock.settimeout(within)
    try:
        while time.monotonic() < deadline:
            if not sock.recv(4096):
                return True
    except TimeoutError:
        return False
    except OSError:
        return True
    return False


def test_flood_of_half_sent_requests(api_url: str) -> None:
    """More half-sent connections than the process has descriptors: requests are still answered
    at once (200, or 503 at the concurrency limit), and every stale connection is closed."""
    port = port_of(api_url)
    opened = time.monotonic()
    flood = [half_sent(port) for _ in range(FLOOD)]
    try:
        for _ in range(3):
            start = time.monotonic()
            response = httpx.get(f"{api_url}/healthz", timeout=PROMPT + 10)
            assert response.status_code in (200, 503), response.text
            assert time.monotonic() - start < PROMPT
        still_open = [sock for sock in flood if not closed_by_server(sock, 0.01)]
        if time.monotonic() - opened < HEADER_TIMEOUT - 0.5:
            assert still_open, "half-sent connections are kept until their deadline"
        for sock in still_open:
            assert closed_by_server(sock, HEADER_TIMEOUT + LATE), "a stale connection stayed open"
    finally:
        for sock in flood:
            sock.close()
    assert httpx.get(f"{api_url}/healthz", timeout=5).status_code == 200


def test_half_sent_body_times_out(api_url: str) -> None:
    """A body that stops arriving is cut off after the body deadline. (With a valid key: a
    keyless request is answered 401 before its body is read.)"""
    key = make_key([uuid.uuid4()])
    with socket.create_connection(("127.0.0.1", port_of(api_url)), timeout=5) as sock:
        sock.sendall(
            b"POST /research-api/evidence/retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {key}\r\n".encode()
            + b'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"url":'
        )
        start = time.monotonic()
        assert closed_by_server(sock, BODY_TIMEOUT + LATE)
        assert time.monotonic() - start > BODY_TIMEOUT - 0.5


def test_idle_keep_alive_is_closed(api_url: str) -> None:
    """After a response, an idle connection is closed after EVIDENCE_HTTP_KEEPALIVE_SECONDS."""
    with socket.create_connection(("127.0.0.1", port_of(api_url)), timeout=5) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = b""
        while not answer.endswith(b'{"status":"ok"}'):
            answer += sock.recv(4096)
        assert status_of(answer) == 200
        assert closed_by_server(sock, KEEPALIVE + 1.5)


def test_oversized_headers_are_refused(api_url: str) -> None:
    """A request line plus headers over the bound: 431 in the envelope, at once."""
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 10_000 + b"\r\n\r\n"
    answer, seconds = raw_request(port_of(api_url), head)
    assert status_of(answer) == 431, answer[:200]
    assert seconds < PROMPT
    assert b'"code": "invalid_input"' in answer

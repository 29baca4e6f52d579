"""`evidence mcp --transport http` cannot be filled by keyless clients, and bounds its bodies.

`initialize` needs no key. The server used to keep a session for each one (up to 10 000, for 30
minutes), so keyless clients could leave keyed ones with 503 "Too many open sessions". It is
stateless now: a keyless `initialize` is answered and leaves nothing behind.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import httpx
import pytest

from tests.conftest import Env
from tests.mcp import read_support as rs
from tests.support.factories import make_key
from tests.support.served import json_of, raw_request, serve

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "flood", "version": "0"},
    },
}
FLOOD = 1_000
#: Growth allowed over the flood; keeping a session each grew the server by 36 MB here.
MAX_GROWTH_MB = 12


def rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


@pytest.fixture(scope="module")
def server(env: Env) -> Iterator[tuple[int, int]]:
    """One MCP HTTP server; (its port, its pid)."""
    args = ["mcp", "--transport", "http", "--host", "127.0.0.1"]
    with serve(args, env.tmp / "mcp-limits.log") as (port, proc):
        yield port, proc.pid


def test_keyless_initialize_opens_no_session(server: tuple[int, int]) -> None:
    """A thousand keyless initializes are answered, open no session, and grow nothing."""
    port, pid = server
    url = f"http://127.0.0.1:{port}/mcp"
    headers = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(headers=headers, timeout=30) as client:
        assert client.post(url, json=INITIALIZE).status_code == 200  # warm
        before = rss_mb(pid)
        sessions = set()
        for _ in range(FLOOD):
            response = client.post(url, json=INITIALIZE)
            assert response.status_code == 200, response.text
            sessions.add(response.headers.get("mcp-session-id"))
        grown = rss_mb(pid) - before
    assert sessions == {None}, f"{len(sessions)} sessions opened"
    assert grown < MAX_GROWTH_MB, f"grew by {grown} MB over {FLOOD} initializes"


def test_keyed_client_works_after_a_flood(server: tuple[int, int]) -> None:
    """After the flood, a keyed client (handshake era and current) calls a tool as usual."""
    port, _ = server
    key = make_key([uuid.uuid4()])
    connect = rs.http_connector(f"http://127.0.0.1:{port}/mcp")

    async def call(mode: str) -> dict:
        async with connect(key, "full", mode) as client:
            return await rs.ok(client, rs.GET_CHUNK, {"chunk_id": "ch_nope"})

    for mode in ("legacy", "auto"):
        assert anyio.run(call, mode) == {"result": {"chunk": None}}


def test_declared_oversize_body_is_refused(server: tuple[int, int]) -> None:
    """The MCP endpoint refuses a declared oversize body at once, in the envelope."""
    port, _ = server
    head = (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: application/json, text/event-stream\r\nContent-Length: 52428800\r\n\r\n"
    )
    answer, seconds = raw_request(port, head, timeout=10)
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert seconds < 2, seconds
    assert json_of(answer)["error"]["code"] == "invalid_input"  # type: ignore[index]


def test_no_standing_event_stream(server: tuple[int, int]) -> None:
    """A GET (a server-to-client event stream) is refused with 405 at once, never held open.

    Stateless, nothing would ever be sent on such a stream, and a keyless client could hold
    connections with as many as it liked.
    """
    port, _ = server
    response = httpx.get(
        f"http://127.0.0.1:{port}/mcp", headers={"Accept": "text/event-stream"}, timeout=10
    )
    assert response.status_code == 405, response.text
    assert response.headers["allow"] == "POST"  # a stream held open ends in a ReadTimeout

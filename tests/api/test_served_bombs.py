"""Bodies built to cost CPU, against `evidence api --workers 2` and `evidence mcp --transport http`
as served: a key bomb (a valid body plus hundreds of thousands of keys), a nesting bomb and a
huge string, keyed and keyless, to every kind of body route. Each is answered in the envelope
(413 for a body over its route's size, 401 without a key, 400 naming the bound), the API's
worker processes are the same before and after (none was killed for missing its health check),
and /healthz and a keyed call answer meanwhile. The CPU each bomb costs: bench/bombs.py.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from api.mcp.server import KEYLESS_BYTES, MESSAGE_BOUNDS
from tests.conftest import Env
from tests.mcp import read_support as rs
from tests.support.factories import check_envelope, make_key
from tests.support.procfs import children, command_line
from tests.support.served import serve, wait_for
from worker.platform.settings import Settings

API = "/research-api"
#: Keys of the key bomb: 440 000 made 7.9 MB, under the 8 MiB body limit.
BOMB_KEYS = 440_000


def valid_bodies(workspace: uuid.UUID) -> dict[tuple[str, str], dict[str, Any]]:
    """A body each route accepts, by (method, path as sent)."""
    ws = str(workspace)
    retrieve = {
        "url": "https://example.org/",
        "kind": "url_text",
        "workspace_id": ws,
        "mutation_id": str(uuid.uuid4()),
    }
    brief = {
        "title": "t",
        "question": "q",
        "summary": "",
        "findings": [],
        "angles": [],
        "notes": "",
        "project_id": None,
        "project_revision": None,
        "corpus_snapshot_id": None,
        "language": "en",
    }
    hook = {"workspace_id": ws, "url": "https://example.org/hook", "events": ["retrieval.settled"]}
    return {
        ("POST", f"{API}/evidence/retrieve"): retrieve,
        ("POST", f"{API}/evidence/retrieve/batch"): {"items": [retrieve]},
        ("POST", f"{API}/evidence/retrievals/batch-get"): {"ids": [str(uuid.uuid4())]},
        ("POST", f"{API}/evidence/quotes/verify"): {
            "workspace_id": ws,
            "quotes": [{"evidence_id": str(uuid.uuid4()), "quote": "q"}],
        },
        ("POST", f"{API}/chunks/get"): {"chunk_id": "ch_nope"},
        ("POST", f"{API}/images/get"): {"image_id": "im_nope"},
        ("POST", f"{API}/briefs/create"): {"workspace_id": ws, "content": brief},
        ("POST", f"{API}/webhooks"): hook,
        ("PATCH", f"{API}/webhooks/{uuid.uuid4()}"): {"description": "d"},
    }


def limit_of(method: str, path: str) -> int:
    from api.serving.bounded_bodies import api_rule

    rule = api_rule({"method": method, "path": path})
    assert rule is not None
    return rule.bounds.byte_limit()


def key_bomb(valid: dict[str, Any]) -> bytes:
    bomb = dict(valid)
    bomb.update((f"k{i}", 1) for i in range(BOMB_KEYS))
    return json.dumps(bomb, separators=(",", ":")).encode()


def deep_bomb(levels: int) -> bytes:
    return b'{"a":' * levels + b"1" + b"}" * levels


def huge_string(valid: dict[str, Any], chars: int) -> bytes:
    name = next(iter(valid))
    return json.dumps({**valid, name: "a" * chars}).encode()


@pytest.fixture(scope="module")
def served(env: Env) -> Iterator[tuple[str, int]]:
    """The API with two worker processes; (its URL, its supervisor's pid)."""
    args = ["api", "--host", "127.0.0.1", "--workers", "2"]
    with serve(args, env.tmp / "api-bombs.log") as (port, proc):
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: len(workers(proc.pid)) == 2 and _healthy(url), timeout=60, interval=0.2)
        yield url, proc.pid


def workers(supervisor: int) -> list[int]:
    """The API's worker processes (the supervisor's children but multiprocessing's tracker)."""
    return sorted(p for p in children(supervisor) if "spawn_main" in command_line(p))


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Watch:
    """/healthz polled on its own thread while bombs are sent; every answer kept."""

    def __init__(self, url: str) -> None:
        self.url, self.statuses, self.done = url, list[int | str](), threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        with httpx.Client(timeout=10) as client:
            while not self.done.is_set():
                try:
                    self.statuses.append(client.get(f"{self.url}/healthz").status_code)
                except httpx.HTTPError as exc:
                    self.statuses.append(type(exc).__name__)
                self.done.wait(0.05)

    def __enter__(self) -> Watch:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join(15)


def send(url: str, method: str, path: str, data: bytes, key: str | None) -> httpx.Response:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.request(method, f"{url}{path}", content=data, headers=headers, timeout=60)


def expect(response: httpx.Response, size: int, limit: int, keyed: bool, bound: str) -> None:
    """413 over the route's size; else 401 without a key; else 400 naming the bound."""
    if size > limit:
        error = check_envelope(response, 413, "invalid_input")
        assert error["details"] == {"max_body_bytes": limit}
    elif not keyed:
        check_envelope(response, 401, "not_entitled")
    else:
        error = check_envelope(response, 400, "invalid_input")
        assert bound in error["message"], error


def test_every_bomb_to_every_body_route(served: tuple[str, int]) -> None:
    url, supervisor = served
    workspace = uuid.uuid4()
    key = make_key([workspace])
    before = workers(supervisor)
    routes = valid_bodies(workspace)
    with Watch(url) as watch:
        for (method, path), valid in routes.items():
            limit = limit_of(method, path)
            bombs = [
                (key_bomb(valid), "keys"),
                (deep_bomb(1_000), "deeper"),
                (deep_bomb(min(limit, Settings().max_body_bytes) // 6), "deeper"),
                (huge_string(valid, 7_000_000), "longer than"),
            ]
            for data, bound in bombs:
                assert len(data) <= Settings().max_body_bytes
                for keyed in (True, False):
                    response = send(url, method, path, data, key if keyed else None)
                    expect(response, len(data), limit, keyed, bound)
            # The route still takes its ordinary body to its own checks (in this suite a webhook
            # URL on port 443 is refused by the guard: that is the route answering).
            ordinary = send(url, method, path, json.dumps(valid).encode(), key)
            assert ordinary.status_code in (200, 201, 202, 400, 404), (path, ordinary.text)
            if ordinary.status_code == 400:
                assert check_envelope(ordinary, 400, "invalid_input")["field"] == "url"
    assert watch.statuses and set(watch.statuses) == {200}, watch.statuses
    assert workers(supervisor) == before, "an API worker process was replaced"
    answer = send(url, "POST", f"{API}/evidence/retrievals/batch-get", b'{"ids": []}', key)
    check_envelope(answer, 400, "invalid_input")


def test_a_batch_item_with_nul_is_that_items_400(served: tuple[str, int]) -> None:
    """Text of batch items is checked item by item, as every other fault of an item."""
    url, _ = served
    workspace = uuid.uuid4()
    key = make_key([workspace])
    item = valid_bodies(workspace)[("POST", f"{API}/evidence/retrieve")]
    bad = {**item, "mutation_id": str(uuid.uuid4()), "url": "https://example.org/\x00"}
    data = json.dumps({"items": [bad]}).encode()
    response = send(url, "POST", f"{API}/evidence/retrieve/batch", data, key)
    assert response.status_code == 200, response.text
    (result,) = response.json()["results"]
    assert result["status"] == 400 and result["error"]["field"] == "url", result


# --- MCP over HTTP ---------------------------------------------------------------------------

HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def tools_call(arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": rs.GET_CHUNK, "arguments": arguments},
    }


@pytest.fixture(scope="module")
def mcp(env: Env) -> Iterator[str]:
    args = ["mcp", "--transport", "http", "--host", "127.0.0.1"]
    with serve(args, env.tmp / "mcp-bombs.log") as (port, _):
        yield f"http://127.0.0.1:{port}/mcp"


def mcp_post(url: str, data: bytes, key: str | None) -> httpx.Response:
    headers = dict(HEADERS)
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    return httpx.post(url, content=data, headers=headers, timeout=60)


def test_mcp_bombs_are_refused_before_the_sdk_parses_them(mcp: str) -> None:
    """Argument keys past the message's byte bound (about 6 MB), nesting and a huge string,
    keyed and keyless."""
    key = make_key([uuid.uuid4()])
    limit = MESSAGE_BOUNDS.byte_limit()
    arguments: dict[str, Any] = {"chunk_id": "ch_nope"}
    arguments.update((f"k{i}", 1) for i in range(limit // 9))
    key_bomb = json.dumps(tools_call(arguments)).encode()
    assert limit < len(key_bomb) < Settings().max_body_bytes
    for keyed in (True, False):
        check_envelope(mcp_post(mcp, key_bomb, key if keyed else None), 413, "invalid_input")
    # Within the size bound: keyless is refused before it is read, keyed by its bounds.
    few = {"chunk_id": "ch_nope", **{f"k{i}": 1 for i in range(100)}}
    nested: Any = 1
    for _ in range(40):
        nested = {"a": nested}
    bodies = [
        (json.dumps(tools_call(few)).encode(), "keys"),
        (json.dumps(tools_call({"chunk_id": nested})).encode(), "deeper"),
        (json.dumps(tools_call({"chunk_id": "a" * 100_000})).encode(), "longer than"),
    ]
    big = json.dumps(tools_call({"chunk_id": "a" * 60_000, "x": ["y"] * 5_000})).encode()
    bodies.append((big, "values"))
    for data, bound in bodies:
        assert len(data) < limit
        error = check_envelope(mcp_post(mcp, data, key), 400, "invalid_input")
        assert bound in error["message"], error
        if len(data) > KEYLESS_BYTES:
            check_envelope(mcp_post(mcp, data, None), 401, "not_entitled")
    check_envelope(mcp_post(mcp, b'{"a":' * 2000 + b"1" + b"}" * 2000, key), 400, "invalid_input")

    async def call() -> dict[str, Any]:
        async with rs.http_connector(mcp)(key, "full", "auto") as client:
            return await rs.ok(client, rs.GET_CHUNK, {"chunk_id": "ch_nope"})

    assert anyio.run(call) == {"result": {"chunk": None}}


def test_keyless_small_calls_are_still_tool_errors(mcp: str) -> None:
    """Below the keyless size, a call without a key is the tool error it always was."""

    async def call() -> dict[str, Any]:
        async with rs.http_connector(mcp)(None, "full", "auto") as client:
            return await rs.refused(client, rs.GET_CHUNK, {"chunk_id": "ch_x"}, "not_entitled")

    assert anyio.run(call)["code"] == "not_entitled"

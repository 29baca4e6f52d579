"""Helpers for the read-side MCP tests: stdio and HTTP clients, checked calls, a brief."""

from __future__ import annotations

import json
import os
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio.to_thread
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Env
from tests.mcp import support
from tests.read.test_read_e2e import JPEG, PNG, content, story
from tests.support.factories import LEAK_PATTERNS
from tests.support.read_client import ReadApi
from tests.support.read_schemas import (
    validate_brief,
    validate_chunk_search,
    validate_get_chunk,
    validate_get_image,
    validate_image_search,
    validate_quotes,
)
from tests.support.services import ROOT, Process, free_port, wait_for
from tests.support.tls_site import TLSSite
from worker import contract

CHUNK_SEARCH = "research_chunk_search"
GET_CHUNK = "research_get_chunk"
IMAGE_SEARCH = "research_image_search"
GET_IMAGE = "research_get_image"
BRIEFS_GET = "sosoapi_research_briefs_get"
VERIFY_QUOTE = "research_verify_quote"

#: Each read tool's contract prefix in worker/contract/ (None: it has no contract files).
CONTRACTS: dict[str, str | None] = {
    CHUNK_SEARCH: None,
    GET_CHUNK: "get_chunk",
    IMAGE_SEARCH: None,
    GET_IMAGE: "get_image",
    BRIEFS_GET: "briefs_get",
    VERIFY_QUOTE: "quotes_verify",
}

#: How each tool's successful structured content is checked.
VALIDATORS: dict[str, Callable[[dict[str, Any]], Any]] = {
    CHUNK_SEARCH: validate_chunk_search,
    GET_CHUNK: validate_get_chunk,
    IMAGE_SEARCH: validate_image_search,
    GET_IMAGE: validate_get_image,
    BRIEFS_GET: validate_brief,
    VERIFY_QUOTE: validate_quotes,
}


def contract_file(name: str) -> dict[str, Any] | None:
    """A contract file of worker/contract/ by name, or None when there is none."""
    text = contract.text(name)
    return json.loads(text) if text is not None else None


def stdio_connector(env: Env) -> support.Connect:
    """Open clients to `python -m api.cli mcp --transport stdio`, the key in EVIDENCE_API_KEY."""

    @asynccontextmanager
    async def open_client(key: str | None, profile: str, mode: str) -> AsyncIterator[Client]:
        server_env = {**os.environ, **support.PROFILES[profile]}
        server_env.pop("EVIDENCE_API_KEY", None)
        if key is not None:
            server_env["EVIDENCE_API_KEY"] = key
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "api.cli", "mcp", "--transport", "stdio"],
            env=server_env,
            cwd=ROOT,
        )
        with open(env.tmp / "mcp-read-stdio.log", "a") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
                yield client

    return open_client


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@contextmanager
def http_server(env: Env) -> Iterator[str]:
    """One `evidence mcp --transport http` process (full profile); its /mcp URL."""
    port = free_port()
    args = ["mcp", "--transport", "http", "--host", "127.0.0.1", "--port", str(port)]
    process = Process(args, env.tmp / "mcp-read-http.log", env=support.PROFILES["full"]).start()
    try:
        wait_for(lambda: _listening(port), timeout=30)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.stop()


def http_connector(url: str) -> support.Connect:
    """Open the SDK's streamable HTTP client to `url`, sending the key as a Bearer header."""

    @asynccontextmanager
    async def open_client(key: str | None, _profile: str, mode: str) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60)) as http:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode=mode) as client:
                yield client

    return open_client


async def ok(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call a read tool that must succeed; check its structured content; return it."""
    result = await client.call_tool(name, arguments)
    assert isinstance(result, types.CallToolResult)
    assert not result.is_error, result.content
    payload = result.structured_content
    assert payload is not None
    assert isinstance(result.content[0], types.TextContent)
    assert json.loads(result.content[0].text) == payload
    assert not LEAK_PATTERNS.search(result.content[0].text)
    VALIDATORS[name](payload)
    return payload


async def refused(client: Client, name: str, arguments: dict[str, Any], code: str) -> dict:
    """Call a read tool that must fail with `code`; return the envelope's error."""
    result = await client.call_tool(name, arguments)
    assert isinstance(result, types.CallToolResult)
    return support.error_of(result, code)


def figure_page(site: TLSSite, marker: str) -> dict[str, str]:
    """Serve an article with two captioned figures (a png, a jpeg named .png), a fake og:image."""
    base = f"/mcp-read/{marker}"
    urls = {
        "png": site.page(f"{base}/lake.png", PNG, content_type="image/png"),
        "jpeg": site.page(f"{base}/gear.png", JPEG, content_type="image/png"),
        "fake": site.page(f"{base}/fake.png", "<html>nope</html>", content_type="image/png"),
    }
    head = f'<meta property="og:image" content="{base}/fake.png">'
    head += f'<meta property="og:image:alt" content="Cover of {marker}">'
    figures = (
        f'<figure><img src="{base}/lake.png" alt="lake"><figcaption>{marker} lake at dawn. '
        '<span class="credit">Photo: A. Smith</span></figcaption></figure>'
        f'<figure><img src="{base}/gear.png"><figcaption>{marker} sampling gear '
        "© Jane Doe</figcaption></figure>"
    )
    urls["page"] = site.page(base, story(marker, images=head, extra=figures))
    return urls


async def images(client: Client, workspace: uuid.UUID, query: str) -> dict[str, dict[str, Any]]:
    """Image search hits by file name."""
    found = await ok(client, IMAGE_SEARCH, {"workspace_id": str(workspace), "query": query})
    return {image["url"].rsplit("/", 1)[1]: image for image in found["result"]["images"]}


async def briefs(client: Client, read: ReadApi, ws: str, evidence: dict[str, Any]) -> None:
    """Create and revise a brief citing `evidence` over HTTP; read it back at each revision."""

    def write() -> str:
        created = read.ok("briefs/create", {"workspace_id": ws, "content": content([evidence])})
        revise = {"workspace_id": ws, "id": created["brief"]["id"], "expected_revision": 1}
        read.ok("briefs/revise", {**revise, "content": content([evidence], "Second title")})
        return str(created["brief"]["id"])

    brief_id = await anyio.to_thread.run_sync(write)
    ids = {"workspace_id": ws, "id": brief_id}
    latest = (await ok(client, BRIEFS_GET, ids))["brief"]
    assert (latest["revision"], latest["content"]["title"]) == (2, "Second title")
    assert {"brief": latest} == read.ok("briefs/get", ids)
    first = await ok(client, BRIEFS_GET, {**ids, "revision": 1})
    assert first == read.ok("briefs/get", {**ids, "revision": 1})
    assert (first["brief"]["revision"], first["brief"]["id"]) == (1, brief_id)
    assert first["brief"]["content"]["title"] == "Oxygen in alpine lakes"
    assert first["brief"]["content"]["findings"][0]["evidence"] == [evidence]
    missing = await refused(client, BRIEFS_GET, {**ids, "revision": 3}, "invalid_input")
    assert missing["field"] == "revision"

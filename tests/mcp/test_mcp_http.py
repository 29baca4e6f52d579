"""The MCP server over streamable HTTP (`evidence mcp --transport http`), via the SDK's client."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Env
from tests.mcp import support
from tests.support.factories import Api, body, make_key
from tests.support.pages import article
from tests.support.services import Process, free_port, wait_for
from tests.support.tls_site import TLSSite

#: The workspace of a valid key the HTTP servers find in EVIDENCE_API_KEY (and must ignore).
ENV_KEY_WORKSPACE = uuid.uuid4()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def servers(env: Env) -> Iterator[dict[str, str]]:
    """One `evidence mcp --transport http` process per profile; their /mcp URLs."""
    running: list[Process] = []
    urls: dict[str, str] = {}
    env_key = make_key([ENV_KEY_WORKSPACE])
    try:
        for profile, settings in support.PROFILES.items():
            port = free_port()
            args = ["mcp", "--transport", "http", "--host", "127.0.0.1", "--port", str(port)]
            log = env.tmp / f"mcp-http-{profile}.log"
            process = Process(args, log, env={**settings, "EVIDENCE_API_KEY": env_key}).start()
            running.append(process)
            wait_for(lambda p=port: _listening(p), timeout=30)
            urls[profile] = f"http://127.0.0.1:{port}/mcp"
        yield urls
    finally:
        for process in running:
            process.stop()


@pytest.fixture
def page(site: TLSSite) -> str:
    """A fresh article on the loopback HTTPS site."""
    path = f"/mcp-http/{uuid.uuid4().hex}"
    return site.page(path, article("Pollen records of the Holocene", marker=path))


@pytest.fixture
def connect(servers: dict[str, str]) -> support.Connect:
    """Open the SDK's streamable HTTP client, sending the key as `Authorization: Bearer`."""

    @asynccontextmanager
    async def open_client(key: str | None, profile: str, mode: str) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60)) as http:
            transport = streamable_http_client(servers[profile], http_client=http)
            async with Client(transport, mode=mode) as client:
                yield client

    return open_client


class TestDiscovery:
    """tools/list over HTTP advertises the contract files as they are."""

    @pytest.mark.parametrize("mode", ["auto", "legacy"])
    def test_schemas_and_annotations_are_the_contract(
        self, connect: support.Connect, mode: str
    ) -> None:
        """Input schema, output schema (SOSOAPI_OUTPUT_SCHEMAS=1) and annotations match."""
        anyio.run(support.check_discovery, connect, mode)

    def test_no_output_schema_unless_enabled(self, connect: support.Connect) -> None:
        """Without SOSOAPI_OUTPUT_SCHEMAS=1 the tool is listed without outputSchema."""
        anyio.run(support.check_discovery_without_output_schemas, connect)

    def test_foreign_origin_is_refused(self, servers: dict[str, str]) -> None:
        """A browser page from another origin cannot drive the local server (DNS rebinding)."""
        response = httpx.post(
            servers["plain"],
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Origin": "http://evil.example", "Accept": "application/json"},
        )
        assert response.status_code == 403


@pytest.mark.usefixtures("services")
class TestRetrieve:
    """Calls record retrievals as the HTTP API does and a real worker settles them."""

    @pytest.mark.parametrize("mode", ["auto", "legacy"])
    def test_call_waits_until_completed(
        self, connect: support.Connect, page: str, workspace: uuid.UUID, mode: str
    ) -> None:
        """One call waits for the worker and answers the completed retrieval (both eras)."""
        key = make_key([workspace])
        anyio.run(support.check_call_settles, connect, key, page, workspace, mode)

    def test_same_mutation_id_polls(
        self, connect: support.Connect, http: object, page: str, workspace: uuid.UUID
    ) -> None:
        """Calling again polls to completed; the HTTP API sees the same retrieval; a conflict."""
        key = make_key([workspace])
        arguments = body(page, workspace)
        done = anyio.run(support.check_poll, connect, key, arguments)
        again = Api(http, key).post(arguments)
        assert again.status_code == 200
        assert again.json()["retrieval"] == done


class TestErrors:
    """Failures are tool errors carrying the contract's envelope."""

    def test_bad_input_names_the_field(
        self, connect: support.Connect, page: str, workspace: uuid.UUID
    ) -> None:
        """A bad uuid, an unknown or missing field, a bad enum, url or null is invalid_input."""
        anyio.run(support.check_bad_inputs, connect, make_key([workspace]), page, workspace)

    @pytest.mark.parametrize("key", [None, "evk_not-a-real-key"])
    def test_missing_or_unknown_key(
        self, connect: support.Connect, key: str | None, page: str, workspace: uuid.UUID
    ) -> None:
        """No Authorization header, or a Bearer value that is not a key, is not_entitled."""
        anyio.run(support.check_refused, connect, key, page, workspace)

    def test_key_of_another_workspace(
        self, connect: support.Connect, page: str, workspace: uuid.UUID
    ) -> None:
        """A key without access to the workspace is not_entitled."""
        anyio.run(support.check_refused, connect, make_key([uuid.uuid4()]), page, workspace)

    def test_key_without_the_scope(
        self, connect: support.Connect, page: str, workspace: uuid.UUID
    ) -> None:
        """A key for the workspace but without agent:research is not_entitled."""
        key = make_key([workspace], scopes=("agent:other",))
        anyio.run(support.check_refused, connect, key, page, workspace)

    def test_server_environment_key_is_not_used(self, connect: support.Connect, page: str) -> None:
        """Over HTTP only the request's Bearer key counts, never EVIDENCE_API_KEY."""
        anyio.run(support.check_refused, connect, None, page, ENV_KEY_WORKSPACE)

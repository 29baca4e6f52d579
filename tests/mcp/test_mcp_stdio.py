"""The MCP server over stdio (`evidence mcp --transport stdio`), driven by the SDK's own client."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.conftest import Env
from tests.mcp import support
from tests.support.factories import Api, body, make_key
from tests.support.pages import article
from tests.support.services import ROOT
from tests.support.tls_site import TLSSite


@pytest.fixture
def page(site: TLSSite) -> str:
    """A fresh article on the loopback HTTPS site."""
    path = f"/mcp-stdio/{uuid.uuid4().hex}"
    return site.page(path, article("Sediment cores of the Baltic", marker=path))


@pytest.fixture
def connect(env: Env) -> support.Connect:
    """Spawn `python -m api.cli mcp --transport stdio` with the key in EVIDENCE_API_KEY."""

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
        with open(env.tmp / "mcp-stdio.log", "a") as errlog:
            async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
                yield client

    return open_client


class TestDiscovery:
    """tools/list over stdio advertises the contract files as they are."""

    @pytest.mark.parametrize("mode", ["auto", "legacy"])
    def test_schemas_and_annotations_are_the_contract(
        self, connect: support.Connect, mode: str
    ) -> None:
        """Input schema, output schema (SOSOAPI_OUTPUT_SCHEMAS=1) and annotations match."""
        anyio.run(support.check_discovery, connect, mode)

    def test_no_output_schema_unless_enabled(self, connect: support.Connect) -> None:
        """Without SOSOAPI_OUTPUT_SCHEMAS=1 the tool is listed without outputSchema."""
        anyio.run(support.check_discovery_without_output_schemas, connect)


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
        """No EVIDENCE_API_KEY, or one that is not a key, is not_entitled."""
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

    def test_over_quota_is_upstream_unavailable_with_the_reason(
        self, connect: support.Connect, page: str, workspace: uuid.UUID
    ) -> None:
        """The MCP contract has no rate_limited: a quota refusal is upstream_unavailable with
        reason rate_limited and when to try again; a replay of the accepted call still answers."""
        from tests.support.factories import parked
        from worker.domain import clock
        from worker.lanes import quota_overrides as quota_store
        from worker.store import db

        override = quota_store.Override(workspace, 1, None, None)
        db.with_transient_retry(lambda s: quota_store.set_override(s, override, clock.now()))
        [held] = parked(workspace, 1)
        replay = {**body("https://example.org/", workspace), "mutation_id": mutation_of(held)}

        async def calls() -> tuple[dict, dict]:
            async with connect(make_key([workspace]), "plain", "auto") as client:
                refused = await support.retrieve(client, body(page, workspace))
                known = await support.retrieve(client, replay)
                return support.error_of(refused, "upstream_unavailable"), support.retrieval_of(
                    known
                )

        error, known = anyio.run(calls)
        assert error["details"] == {"reason": "rate_limited", "retry_after_seconds": 5}
        assert known["id"] == held and known["state"] == "pending"


def mutation_of(retrieval_id: str) -> str:
    from worker.store import db, retrieval_view

    with db.session_scope(readonly=True) as session:
        row = retrieval_view.get_retrieval(session, uuid.UUID(retrieval_id))
        assert row is not None
        return str(row.mutation_id)

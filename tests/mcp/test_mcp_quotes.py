"""research_verify_quote over MCP (stdio, the SDK's client): the route's answer, the route's
refusals in the MCP contract's terms."""

from __future__ import annotations

import uuid

import anyio
import pytest

from tests.conftest import Env
from tests.mcp import read_support as rs
from tests.mcp import support
from tests.read.test_read_e2e import story
from tests.support.factories import Api, make_key
from tests.support.read_client import ReadApi
from tests.support.tls_site import TLSSite


@pytest.fixture
def connect(env: Env) -> support.Connect:
    return rs.stdio_connector(env)


@pytest.mark.usefixtures("services")
def test_verify_quote_tool(
    connect: support.Connect, api: Api, site: TLSSite, workspace: uuid.UUID
) -> None:
    """The tool answers what the route answers; an evidence id of another workspace and bad
    items are invalid_input naming the item's field; another key's workspace likewise."""
    marker = "quillon" + uuid.uuid4().hex[:8]
    read, ws = ReadApi(api), str(workspace)
    done = read.retrieve(site.page(f"/mcp-quotes/{marker}", story(marker)), workspace)
    ref = {"evidence_id": done["evidence"]["evidence_id"]}
    quotes = [
        {**ref, "quote": f"Paragraph 4 about {marker}."},
        {**ref, "quote": f"PARAGRAPH 4   ABOUT {marker}."},
        {**ref, "quote": "Nothing of the kind was ever said on this page at all."},
    ]
    arguments = {"workspace_id": ws, "quotes": quotes}
    stranger = make_key([uuid.uuid4()])

    async def flow() -> None:
        async with connect(api.key, "full", "auto") as client:
            answer = await rs.ok(client, rs.VERIFY_QUOTE, arguments)
            kinds = [q["match"] for q in answer["result"]["quotes"]]
            assert kinds == ["exact", "normalized", "none"]
            assert answer == read.ok("evidence/quotes/verify", arguments)
            unknown = {"evidence_id": str(uuid.uuid4()), "quote": "x"}
            error = await rs.refused(
                client,
                rs.VERIFY_QUOTE,
                {"workspace_id": ws, "quotes": [quotes[0], unknown]},
                "invalid_input",
            )
            assert error["field"] == "quotes[1].evidence_id"
            for bad, field in (
                ({**ref, "quote": ""}, "quotes[0].quote"),
                ({**ref, "quote": "q", "revision": 0}, "quotes[0].revision"),
                ({**ref}, "quotes[0].quote"),
            ):
                error = await rs.refused(
                    client, rs.VERIFY_QUOTE, {"workspace_id": ws, "quotes": [bad]}, "invalid_input"
                )
                assert error["field"] == field, (bad, error)
        async with connect(stranger, "full", "auto") as client:
            error = await rs.refused(client, rs.VERIFY_QUOTE, arguments, "invalid_input")
            assert error["field"] == "quotes[0].evidence_id"

    anyio.run(flow)


@pytest.mark.usefixtures("services")
def test_verify_quote_over_http(env: Env, api: Api, site: TLSSite, workspace: uuid.UUID) -> None:
    """Over streamable HTTP, a call of 100 quotes of 10 000 characters (about 1 MB) fits the
    MCP message bounds and is answered in full."""
    marker = "quillon" + uuid.uuid4().hex[:8]
    done = ReadApi(api).retrieve(site.page(f"/mcp-quotes/{marker}", story(marker)), workspace)
    long = f"Paragraph 2 about {marker}. " + "x" * 9_000
    item = {"evidence_id": done["evidence"]["evidence_id"], "quote": long[:10_000]}
    arguments = {"workspace_id": str(workspace), "quotes": [item] * 100}

    async def flow(url: str) -> None:
        async with rs.http_connector(url)(api.key, "full", "auto") as client:
            answer = await rs.ok(client, rs.VERIFY_QUOTE, arguments)
            assert [q["match"] for q in answer["result"]["quotes"]] == ["none"] * 100

    with rs.http_server(env) as url:
        anyio.run(flow, url)

"""The read-side MCP tools, driven by the SDK's client over stdio (and HTTP) against pages with
figures that the real worker retrieved: search, get, image bytes, and briefs at revisions."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import pytest

from tests.conftest import Env
from tests.mcp import read_support as rs
from tests.mcp import support
from tests.read.test_read_e2e import JPEG, PNG, content
from tests.support.factories import Api, body, make_key
from tests.support.read_client import ReadApi
from tests.support.tls_site import TLSSite


@pytest.fixture
def connect(env: Env) -> support.Connect:
    """Clients of a stdio server spawned for one key."""
    return rs.stdio_connector(env)


@pytest.fixture(scope="module")
def http_url(env: Env) -> Iterator[str]:
    """The /mcp URL of one HTTP server for this module."""
    with rs.http_server(env) as url:
        yield url


@pytest.fixture
def marker() -> str:
    """A word no other test's pages contain."""
    return "quillet" + uuid.uuid4().hex[:8]


@pytest.fixture
def page(site: TLSSite, marker: str) -> dict[str, str]:
    """An article with two captioned figures (a png, a jpeg named .png) and a fake og:image."""
    return rs.figure_page(site, marker)


@pytest.mark.usefixtures("services")
class TestReadFlow:
    """Retrieve through the worker, then search, get, fetch bytes and read briefs over MCP."""

    def test_retrieve_search_get_and_brief(
        self,
        connect: support.Connect,
        api: Api,
        page: dict[str, str],
        workspace: uuid.UUID,
        marker: str,
    ) -> None:
        """Every read tool answers what the HTTP routes answer, for the evidence just taken."""
        read, ws = ReadApi(api), str(workspace)

        async def flow() -> None:
            async with connect(api.key, "full", "auto") as client:
                done = (
                    await support.retrieve_until_settled(client, body(page["page"], workspace))
                )[-1]
                hits = (
                    await rs.ok(client, rs.CHUNK_SEARCH, {"workspace_id": ws, "query": marker})
                )["result"]["chunks"]
                assert hits and all(marker in h["text"] and h["score"] > 0 for h in hits)
                same = read.ok("chunks/search", {"workspace_id": ws, "query": marker})
                assert same == {"result": {"chunks": hits}}
                got = await rs.ok(client, rs.GET_CHUNK, {"chunk_id": hits[0]["chunk_id"]})
                assert got == {"result": {"chunk": {**hits[0], "score": 0.0}}}
                captions = {"workspace_id": ws, "query": marker, "kind": "published_captions"}
                assert (await rs.ok(client, rs.CHUNK_SEARCH, captions))["result"]["chunks"] == []
                found = await rs.images(client, workspace, marker)
                assert set(found) == {"lake.png", "gear.png", "fake.png"}
                lake = found["lake.png"]
                assert (lake["caption"], lake["copyright"]) == (
                    f"{marker} lake at dawn.",
                    "Photo: A. Smith",
                )
                plain = await rs.ok(client, rs.GET_IMAGE, {"image_id": lake["image_id"]})
                assert plain["result"] == {
                    "image": {**lake, "score": 0.0},
                    "bytes_base64": None,
                    "format": "png",
                }
                gear = {"image_id": found["gear.png"]["image_id"], "include_bytes": True}
                full = (await rs.ok(client, rs.GET_IMAGE, gear))["result"]
                assert full["format"] == full["image"]["format"] == "jpeg"
                assert base64.b64decode(full["bytes_base64"]) == JPEG
                await rs.briefs(client, read, ws, done["evidence"])

        anyio.run(flow)

    def test_other_workspace_gets_misses(
        self,
        connect: support.Connect,
        api: Api,
        page: dict[str, str],
        workspace: uuid.UUID,
        marker: str,
    ) -> None:
        """Another workspace's key sees null hits, empty searches and an unknown brief."""
        read, ws = ReadApi(api), str(workspace)
        done = read.retrieve(page["page"], workspace)
        chunk = read.ok("chunks/search", {"workspace_id": ws, "query": marker})["result"]
        images = read.ok("images/search", {"workspace_id": ws, "query": marker})["result"]
        brief = read.ok(
            "briefs/create", {"workspace_id": ws, "content": content([done["evidence"]])}
        )
        other_ws = uuid.uuid4()

        async def as_other() -> None:
            async with connect(make_key([other_ws]), "full", "auto") as client:
                chunk_id = chunk["chunks"][0]["chunk_id"]
                assert await rs.ok(client, rs.GET_CHUNK, {"chunk_id": chunk_id}) == {
                    "result": {"chunk": None}
                }
                for target in (ws, str(other_ws)):
                    search = {"workspace_id": target, "query": marker}
                    assert await rs.ok(client, rs.CHUNK_SEARCH, search) == {
                        "result": {"chunks": []}
                    }
                    assert await rs.ok(client, rs.IMAGE_SEARCH, search) == {
                        "result": {"images": []}
                    }
                image = {"image_id": images["images"][0]["image_id"], "include_bytes": True}
                assert await rs.ok(client, rs.GET_IMAGE, image) == {
                    "result": {"image": None, "bytes_base64": None, "format": None}
                }
                theirs = {"workspace_id": ws, "id": brief["brief"]["id"]}
                unknown = {"workspace_id": ws, "id": str(uuid.uuid4())}
                seen = await rs.refused(client, rs.BRIEFS_GET, theirs, "invalid_input")
                assert seen == await rs.refused(client, rs.BRIEFS_GET, unknown, "invalid_input")
                assert seen["field"] == "id"

        anyio.run(as_other)

    def test_fake_image_is_upstream_unavailable(
        self,
        connect: support.Connect,
        api: Api,
        page: dict[str, str],
        workspace: uuid.UUID,
        marker: str,
    ) -> None:
        """HTML served as image/png is refused with the reason and a retry hint."""
        ReadApi(api).retrieve(page["page"], workspace)

        async def fetch_fake() -> dict[str, Any]:
            async with connect(api.key, "plain", "auto") as client:
                fake = (await rs.images(client, workspace, f"cover {marker}"))["fake.png"]
                arguments = {"image_id": fake["image_id"], "include_bytes": True}
                return await rs.refused(client, rs.GET_IMAGE, arguments, "upstream_unavailable")

        error = anyio.run(fetch_fake)
        assert error["details"] == {"reason": "unsupported_media", "retry_after_seconds": 30}


class TestErrors:
    """Refusals are tool errors with the envelope; misses are not errors."""

    def test_bad_inputs_name_the_field(
        self, connect: support.Connect, workspace: uuid.UUID
    ) -> None:
        """Bad uuids, unknown fields, empty ids, bad limits and null revisions are invalid_input."""
        ws = str(workspace)
        cases = [
            (rs.CHUNK_SEARCH, {"workspace_id": "nope", "query": "x"}, "workspace_id"),
            (rs.CHUNK_SEARCH, {"workspace_id": ws, "query": "x", "limit": 51}, "limit"),
            (rs.CHUNK_SEARCH, {"workspace_id": ws, "query": "x", "kind": "video"}, "kind"),
            (rs.CHUNK_SEARCH, {"workspace_id": ws, "query": ""}, "query"),
            (rs.IMAGE_SEARCH, {"workspace_id": ws, "query": "x", "surprise": 1}, "surprise"),
            (rs.GET_CHUNK, {"chunk_id": ""}, "chunk_id"),
            (rs.GET_IMAGE, {"image_id": "im_x", "include_bytes": "yes"}, "include_bytes"),
            (
                rs.BRIEFS_GET,
                {"workspace_id": ws, "id": str(uuid.uuid4()), "revision": None},
                "revision",
            ),
            (rs.BRIEFS_GET, {"workspace_id": ws}, "id"),
            (rs.BRIEFS_GET, {"workspace_id": ws, "id": str(uuid.uuid4()) + "\n"}, "id"),
            (rs.CHUNK_SEARCH, {"workspace_id": ws + "\n", "query": "x"}, "workspace_id"),
            (rs.IMAGE_SEARCH, {"workspace_id": ws + "\n", "query": "x"}, "workspace_id"),
        ]

        async def check() -> None:
            async with connect(make_key([workspace]), "plain", "auto") as client:
                for name, arguments, field in cases:
                    error = await rs.refused(client, name, arguments, "invalid_input")
                    assert error.get("field") == field, (name, arguments, error)
                assert await rs.ok(client, rs.GET_CHUNK, {"chunk_id": "ch_nope"}) == {
                    "result": {"chunk": None}
                }
                assert await rs.ok(client, rs.GET_IMAGE, {"image_id": "im_nope"}) == {
                    "result": {"image": None, "bytes_base64": None, "format": None}
                }

        anyio.run(check)

    @pytest.mark.parametrize("scoped", [False, True])
    def test_key_is_checked(
        self, connect: support.Connect, workspace: uuid.UUID, scoped: bool
    ) -> None:
        """A key without agent:research, or no key, is not_entitled on every read tool."""
        key = make_key([workspace], scopes=("agent:other",)) if scoped else None
        ws = str(workspace)
        calls = {
            rs.CHUNK_SEARCH: {"workspace_id": ws, "query": "x"},
            rs.GET_CHUNK: {"chunk_id": "ch_x"},
            rs.IMAGE_SEARCH: {"workspace_id": ws, "query": "x"},
            rs.GET_IMAGE: {"image_id": "im_x"},
            rs.BRIEFS_GET: {"workspace_id": ws, "id": str(uuid.uuid4())},
        }

        async def check() -> None:
            async with connect(key, "full", "auto") as client:
                for name, arguments in calls.items():
                    await rs.refused(client, name, arguments, "not_entitled")

        anyio.run(check)


class TestOverHttp:
    """One streamable HTTP server answers the read tools for the Bearer key."""

    def test_lists_the_read_tools(self, http_url: str) -> None:
        """The HTTP transport lists the same read tools."""

        async def listed() -> set[str]:
            async with rs.http_connector(http_url)(None, "full", "auto") as client:
                return {tool.name for tool in (await client.list_tools()).tools}

        assert set(rs.CONTRACTS) <= anyio.run(listed)

    @pytest.mark.usefixtures("services")
    def test_search_and_image_bytes(
        self, http_url: str, api: Api, page: dict[str, str], workspace: uuid.UUID, marker: str
    ) -> None:
        """Over streamable HTTP the Bearer key's searches and image bytes come back the same."""
        ReadApi(api).retrieve(page["page"], workspace)

        async def over_http() -> None:
            async with rs.http_connector(http_url)(api.key, "full", "auto") as client:
                search = {"workspace_id": str(workspace), "query": marker}
                assert (await rs.ok(client, rs.CHUNK_SEARCH, search))["result"]["chunks"]
                lake = (await rs.images(client, workspace, f"{marker} dawn"))["lake.png"]
                image = {"image_id": lake["image_id"], "include_bytes": True}
                got = (await rs.ok(client, rs.GET_IMAGE, image))["result"]
                assert base64.b64decode(got["bytes_base64"]) == PNG and got["format"] == "png"

        anyio.run(over_http)

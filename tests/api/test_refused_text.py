"""Text the database cannot store (U+0000, unpaired surrogates) is a 400 naming its field at the
door, over HTTP and as MCP tool errors on both transports, never 503 "the database is
unavailable"; text from pages with NUL bytes is stored without them."""

from __future__ import annotations

import json
import uuid
from typing import Any

import anyio
import pytest

from tests.conftest import Env
from tests.mcp import read_support as rs
from tests.support.factories import Api, check_envelope, make_key
from tests.support.read_client import ReadApi
from tests.support.tls_site import TLSSite

#: Each text the database refuses, as JSON writes it.
REFUSED = ["a\\u0000b", "\\u0000", "\\ud800", "x\\udc00"]


def post_raw(api: Api, path: str, raw: str, method: str = "POST") -> Any:
    headers = {**api.headers, "Content-Type": "application/json"}
    return api.client.request(method, path, content=raw.encode(), headers=headers)


@pytest.mark.parametrize("text", REFUSED)
@pytest.mark.parametrize(
    ("path", "template", "field"),
    [
        ("/research-api/chunks/get", '{"chunk_id": "%s"}', "chunk_id"),
        ("/research-api/images/get", '{"image_id": "%s"}', "image_id"),
        ("/research-api/chunks/search", '{"workspace_id": "{ws}", "query": "%s"}', "query"),
        (
            "/research-api/webhooks",
            '{"workspace_id": "{ws}", "url": "https://example.org/", '
            '"events": ["retrieval.settled"], "description": "%s"}',
            "description",
        ),
        (
            "/research-api/briefs/create",
            '{"workspace_id": "{ws}", "content": {"title": "%s"}}',
            "content.title",
        ),
        ("/research-api/chunks/get", '{"chunk_id": "c", "extra": {"%s": 1}}', "extra"),
    ],
)
def test_refused_text_is_400_naming_the_field(
    api: Api, workspace: uuid.UUID, path: str, template: str, field: str, text: str
) -> None:
    raw = template.replace("{ws}", str(workspace)).replace("%s", text)
    error = check_envelope(post_raw(api, path, raw), 400, "invalid_input")
    assert error["field"] == field, error


def test_webhook_update_description(api: Api, workspace: uuid.UUID) -> None:
    raw = '{"description": "a\\u0000"}'
    response = post_raw(api, f"/research-api/webhooks/{uuid.uuid4()}", raw, method="PATCH")
    assert check_envelope(response, 400, "invalid_input")["field"] == "description"


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_mcp_tools_refuse_it_as_tool_errors(env: Env, transport: str) -> None:
    key = make_key([uuid.uuid4()])

    async def calls(connect: Any) -> list[dict[str, Any]]:
        async with connect(key, "full", "auto") as client:
            return [
                await rs.refused(client, rs.GET_CHUNK, {"chunk_id": "a\x00"}, "invalid_input"),
                await rs.refused(client, rs.GET_IMAGE, {"image_id": "\x00"}, "invalid_input"),
            ]

    if transport == "stdio":
        errors = anyio.run(calls, rs.stdio_connector(env))
    else:
        with rs.http_server(env) as url:
            errors = anyio.run(calls, rs.http_connector(url))
    assert [e["field"] for e in errors] == ["chunk_id", "image_id"], errors


#: NUL as character references (raw NUL bytes make the page binary: unsupported_media), and
#: unpaired surrogates the same way.
NUL_PAGE = (
    "<html><head><title>Lakes&#0; of the north&#x0;</title>"
    '<meta name="description" content="About&#0; lakes&#xD800;">'
    "</head><body><article><h1>Lakes&#0; of the north</h1>"
    + "".join(
        f"<p>Paragraph {i}&#0; about the cold&#x00; clear&#xDC00; lakes of the north, their"
        " fish, their"
        " shores and the people who live beside them all year round.</p>"
        for i in range(8)
    )
    + "</article></body></html>"
)


@pytest.mark.usefixtures("services")
def test_page_text_with_nul_is_stored_without_it(
    api: Api, site: TLSSite, workspace: uuid.UUID
) -> None:
    """A page whose title, description and text hold NUL (and unpaired surrogates) completes,
    and the evidence kept holds none (each text field of the result and the stored revision)."""
    url = site.page(f"/nul/{uuid.uuid4().hex}", NUL_PAGE.encode())
    done = ReadApi(api).retrieve(url, workspace)
    assert done["result"]["status"] in ("ready", "partial"), done["result"]
    assert "cold" in done["result"]["text"]
    evidence = api.evidence(done["evidence"]["evidence_id"]).json()
    for document in (done, evidence):
        text = json.dumps(document, ensure_ascii=False)
        assert "\x00" not in text and "\\u0000" not in text
        text.encode("utf-8")  # no unpaired surrogate either

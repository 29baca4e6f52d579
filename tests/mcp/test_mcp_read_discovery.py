"""Discovery of the read-side MCP tools over stdio: contract files where they exist, schemas
derived from the HTTP request models where they do not."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from jsonschema import Draft7Validator

from api.mcp.read_tools import model_input_schema
from api.read_schemas import ChunkSearchRequest, ImageSearchRequest
from tests.conftest import Env
from tests.mcp import read_support as rs

READ_ONLY = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}


@pytest.fixture(scope="module")
def tools(env: Env) -> dict[str, types.Tool]:
    """Every tool a stdio server advertises with SOSOAPI_OUTPUT_SCHEMAS=1, by name."""

    async def listed() -> dict[str, types.Tool]:
        async with rs.stdio_connector(env)(None, "full", "auto") as client:
            return {tool.name: tool for tool in (await client.list_tools()).tools}

    return anyio.run(listed)


def _wire(tool: types.Tool) -> dict[str, Any]:
    return tool.model_dump(by_alias=True, mode="json", exclude_none=True)


class TestDiscovery:
    """tools/list offers the read tools with the contract's files or schemas from the models."""

    def test_every_read_tool_is_listed(self, tools: dict[str, types.Tool]) -> None:
        """All five read tools are listed beside the retrieve tool, each naming its scope."""
        assert set(rs.CONTRACTS) | {"sosoapi_research_evidence_retrieve"} <= set(tools)
        for name in rs.CONTRACTS:
            assert "agent:research" in (tools[name].description or ""), name
            assert tools[name].title

    def test_contract_tools_advertise_their_files(self, tools: dict[str, types.Tool]) -> None:
        """get_chunk, get_image and briefs_get carry their contract files exactly."""
        for name, prefix in rs.CONTRACTS.items():
            if prefix is None:
                continue
            entry = _wire(tools[name])
            assert entry["inputSchema"] == rs.contract_file(f"{prefix}.input.json"), name
            assert entry["outputSchema"] == rs.contract_file(f"{prefix}.output.json"), name
            annotations = rs.contract_file(f"{prefix}.annotations.json")
            expected = {**READ_ONLY, "openWorldHint": prefix != "get_chunk"}
            assert entry["annotations"] == (annotations or expected), name
        assert rs.contract_file("briefs_get.annotations.json") is not None
        assert _wire(tools[rs.GET_IMAGE])["annotations"]["openWorldHint"] is True
        assert _wire(tools[rs.GET_CHUNK])["annotations"] == READ_ONLY

    def test_searches_advertise_their_request_models(self, tools: dict[str, types.Tool]) -> None:
        """The searches' inputs are their HTTP models' schemas; outputs list contract items."""
        chunk_item = rs.contract_file("get_chunk.output.json")["properties"]["result"]
        image_item = rs.contract_file("get_image.output.json")["properties"]["result"]
        cases = [
            (rs.CHUNK_SEARCH, ChunkSearchRequest, "chunks", chunk_item["properties"]["chunk"]),
            (rs.IMAGE_SEARCH, ImageSearchRequest, "images", image_item["properties"]["image"]),
        ]
        for name, model, key, item in cases:
            entry = _wire(tools[name])
            schema = entry["inputSchema"]
            assert schema == model_input_schema(model)
            assert schema["properties"]["workspace_id"]["format"] == "uuid"
            assert schema["additionalProperties"] is False
            assert schema["required"] == ["workspace_id", "query"]
            Draft7Validator.check_schema(entry["outputSchema"])
            listing = entry["outputSchema"]["properties"]["result"]["properties"][key]
            assert listing["items"] == item["anyOf"][0]
            assert entry["annotations"] == READ_ONLY
        kind = _wire(tools[rs.CHUNK_SEARCH])["inputSchema"]["properties"]["kind"]
        assert kind["anyOf"][0]["enum"] == ["url_text", "published_captions"]

    def test_search_schemas_accept_what_the_routes_accept(
        self, tools: dict[str, types.Tool]
    ) -> None:
        """The advertised search schemas accept a full body and refuse what the models refuse."""
        schema = _wire(tools[rs.CHUNK_SEARCH])["inputSchema"]
        validator = Draft7Validator(schema)
        good = {"workspace_id": "0" * 8 + "-0000-4000-8000-" + "0" * 12, "query": "lakes"}
        assert validator.is_valid({**good, "limit": 50, "kind": "url_text", "language": "fr-CA"})
        for bad in ({**good, "limit": 0}, {**good, "extra": 1}, {"query": "x"}):
            assert not validator.is_valid(bad), bad

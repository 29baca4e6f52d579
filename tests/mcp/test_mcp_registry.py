"""The tool registry and its failure mapping, through the SDK's in-process client."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from mcp import Client
from sqlalchemy.exc import OperationalError

from api.auth import Principal
from api.mcp.server import build_server
from api.mcp.tools import REGISTRY, ToolSpec
from tests.mcp import support
from tests.support.factories import body, make_key


def _register(monkeypatch: pytest.MonkeyPatch, name: str, exc: Exception) -> None:
    async def run(_principal: Principal, _arguments: Any) -> dict[str, Any]:
        raise exc

    spec = ToolSpec(name, "evidence_retrieve", "Failing tool", "Always fails.", run)
    monkeypatch.setitem(REGISTRY, name, spec)


async def _call(key: str, name: str, arguments: dict[str, Any]) -> Any:
    async with Client(build_server(lambda _ctx: f"Bearer {key}")) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        assert name in listed
        return await client.call_tool(name, arguments)


class TestRegistry:
    """A registered tool is listed and its failures become the contract's envelope."""

    def test_database_outage_is_upstream_unavailable(
        self, monkeypatch: pytest.MonkeyPatch, workspace: uuid.UUID
    ) -> None:
        """A database error is upstream_unavailable with a retry hint, and no SQL."""
        exc = OperationalError("SELECT secret FROM retrieval", {}, Exception("connection refused"))
        _register(monkeypatch, "failing_db", exc)
        key = make_key([workspace])
        result = anyio.run(_call, key, "failing_db", body("https://example.org/", workspace))
        error = support.error_of(result, "upstream_unavailable")
        assert error["details"]["retry_after_seconds"] >= 1

    def test_unexpected_error_is_internal(
        self, monkeypatch: pytest.MonkeyPatch, workspace: uuid.UUID
    ) -> None:
        """Any other exception is `internal` and says nothing about itself."""
        _register(monkeypatch, "failing_bug", RuntimeError("Traceback: evk_leaked"))
        key = make_key([workspace])
        result = anyio.run(_call, key, "failing_bug", body("https://example.org/", workspace))
        error = support.error_of(result, "internal")
        assert error["message"] == "internal error"

    def test_arguments_checked_against_the_advertised_schema(
        self, monkeypatch: pytest.MonkeyPatch, workspace: uuid.UUID
    ) -> None:
        """A tool without a model still has its arguments checked against its input schema."""
        _register(monkeypatch, "failing_schema", RuntimeError("not reached"))
        key = make_key([workspace])
        arguments = {**body("https://example.org/", workspace), "extra": 1}
        result = anyio.run(_call, key, "failing_schema", arguments)
        assert support.error_of(result, "invalid_input")["field"] == "extra"

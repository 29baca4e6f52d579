"""Helpers shared by the MCP transport tests: contract files, result checks, a call loop."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import mcp_types as types
from mcp import Client

from tests.support.factories import LEAK_PATTERNS, SETTLED, body
from tests.support.schemas import validate_retrieval_payload
from tests.support.slowdown import scaled
from worker import contract as contract_files

TOOL = "sosoapi_research_evidence_retrieve"
TOOL_ERROR_CODES = {"invalid_input", "not_entitled", "upstream_unavailable", "internal"}


def contract(part: str) -> dict[str, Any]:
    """One of the tool's contract files (`input`, `output`, `annotations`)."""
    return contract_files.load(f"evidence_retrieve.{part}.json")


def retrieval_of(result: types.CallToolResult) -> dict[str, Any]:
    """Assert a successful call whose structured content is a valid retrieval; return it."""
    assert not result.is_error, result.content
    payload = result.structured_content
    assert payload is not None
    validate_retrieval_payload(payload)
    assert isinstance(result.content[0], types.TextContent)
    assert json.loads(result.content[0].text) == payload
    return payload["retrieval"]


def error_of(result: types.CallToolResult, code: str) -> dict[str, Any]:
    """Assert a tool error carrying the contract's envelope with `code`; return the error."""
    assert result.is_error, result.structured_content
    assert isinstance(result.content[0], types.TextContent)
    text = result.content[0].text
    assert not LEAK_PATTERNS.search(text), text
    body = json.loads(text)
    assert result.structured_content == body
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] in TOOL_ERROR_CODES and error["code"] == code, body
    assert isinstance(error["message"], str) and error["message"]
    assert set(error) <= {"code", "message", "field", "details"}, body
    return error


def tool_entry(tools: types.ListToolsResult) -> dict[str, Any]:
    """The retrieve tool's discovery entry as it was on the wire."""
    names = [tool.name for tool in tools.tools]
    assert TOOL in names, names
    tool = tools.tools[names.index(TOOL)]
    return tool.model_dump(by_alias=True, mode="json", exclude_none=True)


async def retrieve(client: Client, arguments: dict[str, Any]) -> types.CallToolResult:
    """Call the retrieve tool once."""
    result = await client.call_tool(TOOL, arguments)
    assert isinstance(result, types.CallToolResult)
    return result


async def retrieve_until_settled(
    client: Client, arguments: dict[str, Any], timeout: float = 45
) -> list[dict[str, Any]]:
    """Call, then call again with the same mutation_id until settled; return every answer."""
    deadline = time.monotonic() + scaled(timeout)  # only a hang: longer on a busy machine
    answers = [retrieval_of(await retrieve(client, arguments))]
    while answers[-1]["state"] not in SETTLED:
        assert time.monotonic() < deadline, answers[-1]
        answers.append(retrieval_of(await retrieve(client, arguments)))
    assert len({a["id"] for a in answers}) == 1, answers
    return answers


def bad_inputs(url: str, workspace: uuid.UUID) -> list[tuple[dict[str, Any], str]]:
    """Arguments the input schema refuses, and the field the error must name."""
    good = {
        "url": url,
        "kind": "url_text",
        "workspace_id": str(workspace),
        "mutation_id": str(uuid.uuid4()),
    }
    return [
        ({**good, "workspace_id": "not-a-uuid"}, "workspace_id"),
        ({**good, "mutation_id": "1234"}, "mutation_id"),
        ({**good, "surprise": True}, "surprise"),
        ({k: v for k, v in good.items() if k != "kind"}, "kind"),
        ({**good, "kind": "video"}, "kind"),
        ({**good, "language": None}, "language"),
        ({**good, "url": "not a uri"}, "url"),
        ({**good, "url": url + "\n"}, "url"),
        ({**good, "workspace_id": str(workspace) + "\n"}, "workspace_id"),
        ({**good, "mutation_id": good["mutation_id"] + "\n"}, "mutation_id"),
        ({**good, "language": "en\n"}, "language"),
    ]


#: Server configurations the tests run: `full` advertises output schemas and waits for the
#: retrieval to settle; `plain` advertises none and answers at once (so clients poll).
PROFILES: dict[str, dict[str, str]] = {
    "full": {"SOSOAPI_OUTPUT_SCHEMAS": "1", "EVIDENCE_MCP_WAIT_SECONDS": "30"},
    "plain": {"SOSOAPI_OUTPUT_SCHEMAS": "0", "EVIDENCE_MCP_WAIT_SECONDS": "0"},
}

#: Opens a client to a server of `profile`, acting with `key` (None: no key), in `mode`.
Connect = Callable[[str | None, str, str], AbstractAsyncContextManager[Client]]


async def check_discovery(connect: Connect, mode: str) -> None:
    """tools/list advertises the contract's input schema, output schema and annotations."""
    async with connect(None, "full", mode) as client:
        entry = tool_entry(await client.list_tools())
    assert entry["inputSchema"] == contract("input")
    assert entry["outputSchema"] == contract("output")
    assert entry["annotations"] == contract("annotations")
    assert "agent:research" in entry["description"]


async def check_discovery_without_output_schemas(connect: Connect) -> None:
    """Without SOSOAPI_OUTPUT_SCHEMAS=1 discovery carries no output schema."""
    async with connect(None, "plain", "auto") as client:
        entry = tool_entry(await client.list_tools())
    assert "outputSchema" not in entry
    assert entry["inputSchema"] == contract("input")
    assert entry["annotations"] == contract("annotations")


async def check_call_settles(
    connect: Connect, key: str, url: str, workspace: uuid.UUID, mode: str
) -> None:
    """One call waits for the worker and answers the completed retrieval."""
    arguments = body(url, workspace)
    async with connect(key, "full", mode) as client:
        answers = await retrieve_until_settled(client, arguments)
    done = answers[-1]
    assert len(answers) == 1, [a["state"] for a in answers]
    assert done["state"] == "completed" and done["result"]["status"] == "ready", done
    assert done["mutation_id"] == arguments["mutation_id"]
    assert done["evidence"]["revision"] == 1


async def check_poll(connect: Connect, key: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """With no wait the first answer is open; calling again polls it to completed."""
    async with connect(key, "plain", "auto") as client:
        answers = await retrieve_until_settled(client, arguments)
        assert answers[0]["state"] == "pending"
        assert answers[-1]["state"] == "completed", answers[-1]
        assert answers[-1]["result"]["status"] == "ready"
        changed = {**arguments, "url": arguments["url"] + "?other"}
        error = error_of(await retrieve(client, changed), "invalid_input")
        assert error["field"] == "mutation_id"
    return answers[-1]


async def check_bad_inputs(connect: Connect, key: str, url: str, workspace: uuid.UUID) -> None:
    """Arguments outside the input schema are invalid_input naming the field."""
    async with connect(key, "plain", "auto") as client:
        for arguments, field in bad_inputs(url, workspace):
            error = error_of(await retrieve(client, arguments), "invalid_input")
            assert error.get("field") == field, (arguments, error)


async def check_refused(connect: Connect, key: str | None, url: str, workspace: uuid.UUID) -> None:
    """A call with this key is refused as not_entitled and records nothing."""
    arguments = body(url, workspace)
    async with connect(key, "plain", "auto") as client:
        error_of(await retrieve(client, arguments), "not_entitled")
    assert not _recorded(workspace, arguments["mutation_id"])


def _recorded(workspace: uuid.UUID, mutation_id: str) -> bool:
    import sqlalchemy as sa

    from worker.store import db
    from worker.store.models import Retrieval

    table = Retrieval.__table__  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        query = sa.select(sa.func.count()).where(
            table.c.workspace_id == workspace, table.c.mutation_id == uuid.UUID(mutation_id)
        )
        return bool(session.execute(query).scalar_one())

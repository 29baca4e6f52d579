"""The OpenAPI components: the contract's JSON Schemas (worker/contract), named for the routes.

Request and response bodies are the very files the MCP tools advertise; routes without a contract
file get a schema composed from the contract's own parts (a search's items are `get_chunk`'s
chunk, a brief's content is `briefs_get`'s), so the HTTP and MCP descriptions cannot drift.
"""

from __future__ import annotations

import copy
from typing import Any

from api.mcp import read_tools  # noqa: F401  (provides the search contracts' documents)
from api.mcp.tools import contract_file
from api.read_schemas import MAX_SAFE_INTEGER
from api.schemas import _ITEMS_SCHEMA, BatchGetRequest, BatchGetResponse, BatchRetrieveResponse
from api.services.diff_render import COMPARED
from api.watch_schemas import openapi_components as watch_components
from api.webhook_schemas import openapi_components

#: The error codes a body may carry (`payload_too_large` and `rate_limited` included).
ERROR_CODES = [
    "invalid_input",
    "not_entitled",
    "not_found",
    "payload_too_large",
    "rate_limited",
    "upstream_unavailable",
    "internal",
]
UUID: dict[str, Any] = {"type": "string", "format": "uuid"}
REVISION: dict[str, Any] = {"type": "integer", "exclusiveMinimum": 0, "maximum": MAX_SAFE_INTEGER}


def _contract(filename: str) -> dict[str, Any]:
    """A contract file as an OpenAPI 3.1 schema (the dialect is the document's own)."""
    schema = contract_file(filename)
    schema.pop("$schema", None)
    schema.pop("x-fastmcp-wrap-result", None)  # how the MCP server wraps it; not HTTP's concern
    return schema


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def _evidence_schema(retrieval: dict[str, Any]) -> dict[str, Any]:
    """`GET /research-api/evidence/{id}` (no contract file): parts of the retrieval's result."""
    fields = retrieval["properties"]["retrieval"]["properties"]
    result = fields["result"]["anyOf"][0]["properties"]
    instant = fields["created_at"]
    digest = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
    seen = {**instant, "description": "When this content was first seen (its `created_at`)."}
    confirmed = {
        **instant,
        "description": "When this content was last fetched or confirmed (a 304, an identical "
        "re-fetch); a reuse within a client's max-age does not move it.",
    }
    listed = _object(
        {
            "revision": REVISION,
            "content_sha256": digest,
            "created_at": instant,
            "first_seen_at": seen,
            "last_confirmed_at": confirmed,
        },
        [],
    )
    listed["required"] = list(listed["properties"])
    properties = {
        "evidence_id": UUID,
        "workspace_id": UUID,
        "kind": result["kind"],
        "url": {"type": "string", "description": "The source's normalised final URL."},
        "language": {"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}]},
        "revision": REVISION,
        "latest_revision": REVISION,
        "content_sha256": digest,
        "text": result["text"],
        "title": result["title"],
        "description": result["description"],
        "segments": result["segments"],
        "provenance": result["provenance"],
        "created_at": instant,
        "last_confirmed_at": confirmed,
        "revisions": {"type": "array", "items": listed},
    }
    return _object({"evidence": _object(properties, list(properties))}, ["evidence"])


def _diff_schema(retrieval: dict[str, Any]) -> dict[str, Any]:
    """`GET /research-api/evidence/{id}/diff` (no contract file): a text's or a track's changes."""

    result = retrieval["properties"]["retrieval"]["properties"]["result"]["anyOf"][0]
    cue = copy.deepcopy(result["properties"]["segments"]["items"])
    count = {"type": "integer", "minimum": 0}
    flag = {"type": "boolean"}
    text = _object(
        {
            "unified": {"type": "string", "description": "`diff -u` format; empty if equal."},
            "lines_added": count,
            "lines_removed": count,
            "approximate": flag,
            "truncated": flag,
        },
        ["unified", "lines_added", "lines_removed", "approximate", "truncated"],
    )
    side = {"anyOf": [cue, {"type": "null"}]}
    change = {"type": "string", "enum": ["added", "removed", "changed"]}
    entry = _object({"change": change, "from": side, "to": side}, ["change", "from", "to"])
    counts = ("unchanged", "shifted", "changed", "added", "removed")
    cues = _object(
        {
            "offset_ms": {"type": "integer"},
            **dict.fromkeys(counts, count),
            "entries": {"type": "array", "items": entry},
            "truncated": flag,
        },
        ["offset_ms", *counts, "entries", "truncated"],
    )
    digest = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
    properties = {
        "evidence_id": UUID,
        "kind": result["properties"]["kind"],
        "from_revision": REVISION,
        "to_revision": REVISION,
        "from_sha256": digest,
        "to_sha256": digest,
        "changed": {
            "type": "array",
            "items": {"type": "string", "enum": list(COMPARED)},
            "uniqueItems": True,
        },
        "text": {"anyOf": [text, {"type": "null"}]},
        "cues": {"anyOf": [cues, {"type": "null"}]},
        "truncated": flag,
    }
    return _object({"diff": _object(properties, list(properties))}, ["diff"])


def _error_schema() -> dict[str, Any]:
    error = _object(
        {
            "code": {"type": "string", "enum": ERROR_CODES},
            "message": {"type": "string", "minLength": 1},
            "field": {
                "type": "string",
                "description": "The offending parameter, when one is to blame.",
            },
            "details": {"type": "object", "additionalProperties": True},
        },
        ["code", "message"],
    )
    error["description"] = "Branch on `code`; never match `message`, which is for people."
    return _object({"error": error}, ["error"])


def _ready_schema() -> dict[str, Any]:
    age = {"anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}]}
    ages = _object({"pending": age, "running": age}, ["pending", "running"])
    checks = _object(
        {
            "database": {"type": "boolean"},
            "broker": {"type": "boolean"},
            "oldest_age_seconds": ages,
            "watch_scheduler": _object({"last_tick_age_seconds": age}, ["last_tick_age_seconds"]),
        },
        ["database", "broker"],
    )
    status = {"type": "string", "enum": ["ready", "unavailable"]}
    return _object({"status": status, "checks": checks}, ["status", "checks"])


def _brief_requests(content: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The brief writes' bodies (no contract files): ids, revisions and `briefs_get`'s content."""
    workspace = {"workspace_id": UUID}
    return {
        "BriefContent": content,
        "BriefCreateRequest": _object(
            {**workspace, "content": _ref("BriefContent")}, ["workspace_id", "content"]
        ),
        "BriefReviseRequest": _object(
            {
                **workspace,
                "id": UUID,
                "expected_revision": REVISION,
                "content": _ref("BriefContent"),
            },
            ["workspace_id", "id", "expected_revision", "content"],
        ),
        "BriefReviewRequest": _object(
            {**workspace, "id": UUID, "revision": REVISION}, ["workspace_id", "id", "revision"]
        ),
        "BriefArchiveRequest": _object({**workspace, "id": UUID}, ["workspace_id", "id"]),
    }


def _described(schema: dict[str, Any], text: str) -> dict[str, Any]:
    return {**schema, "description": text}


def components() -> dict[str, dict[str, Any]]:
    """Every schema the document refers to, by component name."""
    retrieval = _contract("evidence_retrieve.output.json")
    brief = _contract("briefs_get.output.json")
    content = copy.deepcopy(brief["properties"]["brief"]["properties"]["content"])
    open_note = (
        " Unknown fields are ignored: this contract schema, unlike the others, does not forbid"
        " them."
    )
    return {
        "RetrieveRequest": _described(
            _contract("evidence_retrieve.input.json"),
            "worker/contract/evidence_retrieve.input.json. Beyond `format: uri`, `url` must parse"
            " by the WHATWG URL Standard (as browsers read URLs) with a host: `https://`,"
            " `https://::1/` or a port like `443:22` is a 400 naming `url`. A URL that parses but"
            " is not public HTTPS on an allowed port is accepted and settles blocked/unsafe_url.",
        ),
        "RetrievalResponse": _described(retrieval, "worker/contract/evidence_retrieve.output.json"),
        "EvidenceResponse": _evidence_schema(retrieval),
        "EvidenceDiffResponse": _diff_schema(retrieval),
        "ChunkSearchRequest": _described(
            _contract("chunk_search.input.json"), "As the research_chunk_search tool's input."
        ),
        "ChunkSearchResponse": _contract("chunk_search.output.json"),
        "ChunkGetRequest": _described(
            _contract("get_chunk.input.json"), "worker/contract/get_chunk.input.json." + open_note
        ),
        "ChunkGetResponse": _described(
            _contract("get_chunk.output.json"), "worker/contract/get_chunk.output.json"
        ),
        "ImageSearchRequest": _described(
            _contract("image_search.input.json"), "As the research_image_search tool's input."
        ),
        "ImageSearchResponse": _contract("image_search.output.json"),
        "ImageGetRequest": _described(
            _contract("get_image.input.json"), "worker/contract/get_image.input.json." + open_note
        ),
        "ImageGetResponse": _described(
            _contract("get_image.output.json"), "worker/contract/get_image.output.json"
        ),
        "EvidenceExportRequest": _contract("evidence_export.input.json"),
        "QuoteVerifyRequest": _described(
            _contract("quotes_verify.input.json"), "worker/contract/quotes_verify.input.json"
        ),
        "QuoteVerifyResponse": _described(
            _contract("quotes_verify.output.json"), "worker/contract/quotes_verify.output.json"
        ),
        "BriefGetRequest": _described(
            _contract("briefs_get.input.json"), "worker/contract/briefs_get.input.json"
        ),
        "BriefResponse": _described(brief, "worker/contract/briefs_get.output.json"),
        **_brief_requests(content),
        "Error": _error_schema(),
        "Health": _object({"status": {"type": "string", "const": "ok"}}, ["status"]),
        "Readiness": _ready_schema(),
        **_batch_schemas(),
        **openapi_components(),
        **watch_components(),
    }


def _batch_schemas() -> dict[str, dict[str, Any]]:
    """The batch routes' bodies, from their models (whose retrievals are the contract's)."""

    schemas: dict[str, dict[str, Any]] = {
        # Its items refer to the RetrieveRequest component, which pydantic cannot resolve.
        "BatchRetrieveRequest": _object({"items": copy.deepcopy(_ITEMS_SCHEMA)}, ["items"]),
    }
    for model in (BatchRetrieveResponse, BatchGetRequest, BatchGetResponse):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in schema.pop("$defs", {}).items():
            schemas.setdefault(name, definition)
        schemas[model.__name__] = schema
    # The ids are checked as UUIDs (the model's validator does not show in its schema).
    schemas["BatchGetRequest"]["properties"]["ids"]["items"] = copy.deepcopy(UUID)
    return schemas

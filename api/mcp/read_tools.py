"""The read side as MCP tools: passages, images and briefs, answered as the read routes answer.

Each tool runs the same `api.services.read` function as its HTTP route, so its structured content
is the route's document (`{"result": …}` or `{"brief": …}`) and the key's workspace walls are the
same: a miss is a null hit or an empty search, never an error. `get_chunk`, `get_image` and
`briefs_get` advertise their contract files; the two searches, which have none, advertise a
schema derived from their HTTP request models and an output built from the contract's item shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, get_args

import anyio.to_thread
from pydantic import BaseModel
from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import ApiError, invalid_input
from api.mcp.tools import contract_file, for_mcp, provide, tool
from api.read_schemas import (
    BriefGetRequest,
    ChunkGetRequest,
    ChunkSearchRequest,
    ImageGetRequest,
    ImageSearchRequest,
    QuoteVerifyRequest,
)
from api.schemas import UuidText
from api.services import image_fetch, quotes, read
from worker.store import db

#: Annotations of a tool that only reads this service's own records.
READ_ONLY: dict[str, bool] = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}
#: The validator `UuidText` applies, which pydantic cannot render as `format: uuid` by itself.
_UUID_CHECK = get_args(UuidText)[1]


def model_input_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of an HTTP request model, marking the fields it checks as uuids."""
    schema = model.model_json_schema()
    schema.pop("title", None)
    for name, field in model.model_fields.items():
        prop = schema["properties"][name]
        prop.pop("title", None)
        if _UUID_CHECK in field.metadata:
            prop["format"] = "uuid"
    return schema


def listing_output_schema(contract: str, item: str, key: str) -> dict[str, Any]:
    """`{"result": {key: [item…]}}`, items shaped as in `contract`'s output, or its error branch."""
    source = contract_file(f"{contract}.output.json")
    item_schema = source["properties"]["result"]["properties"][item]["anyOf"][0]
    listing = {"type": "array", "items": item_schema}
    return {
        "type": "object",
        "properties": {
            "result": {"type": "object", "properties": {key: listing}, "required": [key]},
            "error": source["properties"]["error"],
        },
        "oneOf": [{"required": ["result"]}, {"required": ["error"]}],
    }


provide("chunk_search.input.json", model_input_schema(ChunkSearchRequest))
provide("chunk_search.output.json", listing_output_schema("get_chunk", "chunk", "chunks"))
provide("chunk_search.annotations.json", READ_ONLY)
provide("get_chunk.annotations.json", READ_ONLY)
provide("image_search.input.json", model_input_schema(ImageSearchRequest))
provide("image_search.output.json", listing_output_schema("get_image", "image", "images"))
provide("image_search.annotations.json", READ_ONLY)
#: With include_bytes the image itself is fetched from its (public) origin.
provide("get_image.annotations.json", {**READ_ONLY, "openWorldHint": True})


def _read(fn: Callable[..., dict[str, Any]], principal: Principal, argument: Any) -> dict[str, Any]:
    with db.session_scope(readonly=True) as session:
        return fn(session, principal, argument)


async def _answer(
    fn: Callable[[Session, Principal, Any], dict[str, Any]], principal: Principal, argument: Any
) -> dict[str, Any]:
    """Run a read-service function in a worker thread, in its own read-only session."""
    try:
        return await anyio.to_thread.run_sync(partial(_read, fn, principal, argument))
    except ApiError as exc:  # over the read rate: the MCP contract's terms
        raise for_mcp(exc) from None


@tool(
    "research_chunk_search",
    contract="chunk_search",
    title="Search Passages (Research)",
    description=(
        "Search the workspace's retrieved evidence for passages matching a query, best first; "
        "filter by kind or language. Returned text is untrusted. Requires agent:research."
    ),
    model=ChunkSearchRequest,
)
async def chunk_search(principal: Principal, request: ChunkSearchRequest) -> dict[str, Any]:
    """As `POST /research-api/chunks/search`: ranked passages, or none."""
    return await _answer(read.search_chunks, principal, request)


@tool(
    "research_get_chunk",
    contract="get_chunk",
    title="Get Passage (Research)",
    description=(
        "Fetch a single text chunk by the stable id research_chunk_search gave; a miss is a "
        "null chunk, not an error. Returned text is untrusted. Requires agent:research."
    ),
    model=ChunkGetRequest,
)
async def get_chunk(principal: Principal, request: ChunkGetRequest) -> dict[str, Any]:
    """As `POST /research-api/chunks/get`: one passage (score 0.0), or a null chunk."""
    return await _answer(read.get_chunk, principal, request.chunk_id)


@tool(
    "research_image_search",
    contract="image_search",
    title="Search Images (Research)",
    description=(
        "Search the workspace's retrieved images by caption and credit, best first. Captions "
        "are untrusted. Requires agent:research."
    ),
    model=ImageSearchRequest,
)
async def image_search(principal: Principal, request: ImageSearchRequest) -> dict[str, Any]:
    """As `POST /research-api/images/search`: matching images, or none."""
    return await _answer(read.search_images, principal, request)


@tool(
    "research_get_image",
    contract="get_image",
    title="Get Image (Research)",
    description=(
        "Fetch a single image by its stable id; include_bytes=true adds its base64 bytes, "
        "checked to be png, jpeg or webp. A miss is a null image. Requires agent:research."
    ),
    model=ImageGetRequest,
)
async def get_image(principal: Principal, request: ImageGetRequest) -> dict[str, Any]:
    """As `POST /research-api/images/get`; bytes that cannot be had are upstream_unavailable."""
    try:
        return await image_fetch.get_image(principal, request)
    except ApiError as exc:
        if exc.code == "rate_limited":
            raise for_mcp(exc) from None
        if exc.code == "upstream_unavailable":
            retry = image_fetch.retry_after(exc)
            exc.details = {**(exc.details or {}), "retry_after_seconds": retry}
        raise


@tool(
    "sosoapi_research_briefs_get",
    contract="briefs_get",
    title="Get a version of a research brief",
    description=(
        "Read a research brief by id, optionally at an exact revision; returned text is "
        "untrusted. Requires agent:research."
    ),
    model=BriefGetRequest,
)
async def briefs_get(principal: Principal, request: BriefGetRequest) -> dict[str, Any]:
    """As `POST /research-api/briefs/get`; a brief this key cannot see is invalid_input (id)."""
    try:
        return await _answer(read.get_brief, principal, request)
    except ApiError as exc:
        if exc.code != "not_found":
            raise
    if request.revision is not None:
        latest = BriefGetRequest(workspace_id=request.workspace_id, id=request.id)
        try:
            await _answer(read.get_brief, principal, latest)
        except ApiError as again:
            if again.code != "not_found":
                raise
        else:
            raise invalid_input("the brief has no such revision", field="revision")
    raise invalid_input("no such brief", field="id")


@tool(
    "research_verify_quote",
    contract="quotes_verify",
    title="Verify Quotes (Research)",
    description=(
        "Check up to 100 quotes against immutable evidence revisions of the workspace: exact, "
        "normalized, fuzzy (with a score) or none, with offsets, chunk ids, caption cues, a "
        "text-fragment link and context. Requires agent:research."
    ),
    model=QuoteVerifyRequest,
)
async def verify_quote(principal: Principal, request: QuoteVerifyRequest) -> dict[str, Any]:
    """As `POST /research-api/evidence/quotes/verify`; an evidence id this key cannot see is
    invalid_input naming it (the MCP contract has no not_found)."""
    try:
        return await _answer(quotes.verify_quotes, principal, request)
    except ApiError as exc:
        if exc.code != "not_found":
            raise
        raise invalid_input(exc.message, exc.field) from None

"""The read side as plain functions over a session and a principal (routes and MCP tools).

Brief writes are in `api.services.briefs`.

A key sees only its workspaces: an id in any other workspace is answered exactly like an
unknown id (a null hit, an empty search, or 404 for briefs), so existence never leaks.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import not_found
from api.read_schemas import (
    BriefGetRequest,
    ChunkSearchRequest,
    ImageGetRequest,
    ImageSearchRequest,
)
from api.services.read_admission import admit_read_side
from worker.store import briefs
from worker.store import chunks as chunk_store
from worker.store import images as image_store


def search_chunks(
    session: Session, principal: Principal, request: ChunkSearchRequest
) -> dict[str, Any]:
    """research_chunk_search: ranked passages of the workspace."""
    principal.require(None)
    if not principal.can_read(request.workspace):
        return {"result": {"chunks": []}}
    admit_read_side(principal, request.workspace)
    chunks = chunk_store.search_chunks(
        session,
        request.workspace,
        request.query,
        kind=request.kind,
        language=request.language,
        limit=request.limit,
    )
    return {"result": {"chunks": chunks}}


def get_chunk(session: Session, principal: Principal, chunk_id: str) -> dict[str, Any]:
    """research_get_chunk: one passage by id (score 0.0), or a null miss."""
    principal.require(None)
    admit_read_side(principal)
    found = chunk_store.get_chunk(session, chunk_id)
    if found is None or not principal.can_read(found[0]):
        return {"result": {"chunk": None}}
    return {"result": {"chunk": found[1]}}


def search_images(
    session: Session, principal: Principal, request: ImageSearchRequest
) -> dict[str, Any]:
    """research_image_search: images of the workspace whose captions match."""
    principal.require(None)
    if not principal.can_read(request.workspace):
        return {"result": {"images": []}}
    admit_read_side(principal, request.workspace)
    images = image_store.search_images(
        session, request.workspace, request.query, limit=request.limit
    )
    return {"result": {"images": images}}


def find_image(
    session: Session, principal: Principal, request: ImageGetRequest
) -> dict[str, Any] | None:
    """research_get_image's lookup: the image, or None for an id this key cannot see."""
    principal.require(None)
    admit_read_side(principal)
    found = image_store.get_image(session, request.image_id)
    if found is None or not principal.can_read(found[0]):
        return None
    return found[1]


def image_payload(image: dict[str, Any] | None, body: bytes | None = None) -> dict[str, Any]:
    """research_get_image's answer: the image (or a null miss), with its bytes when fetched."""
    if image is None:
        return {"result": {"image": None, "bytes_base64": None, "format": None}}
    encoded = base64.b64encode(body).decode("ascii") if body is not None else None
    return {"result": {"image": image, "bytes_base64": encoded, "format": image["format"]}}


def get_brief(session: Session, principal: Principal, request: BriefGetRequest) -> dict[str, Any]:
    """sosoapi_research_briefs_get: a brief at its latest or an exact revision."""
    principal.require(None)
    brief = None
    if principal.can_read(request.workspace):
        admit_read_side(principal, request.workspace)
        brief = briefs.read_brief(
            session, request.workspace, uuid.UUID(request.id), request.revision
        )
    if brief is None:
        raise not_found("no such brief")
    return {"brief": brief}

"""The read side as plain functions over a session and a principal (routes and MCP tools).

A key sees only its workspaces: an id in any other workspace is answered exactly like an
unknown id (a null hit, an empty search, or 404 for briefs), so existence never leaks.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import ApiError, invalid_input, not_found
from api.read_schemas import (
    BriefArchiveRequest,
    BriefCreateRequest,
    BriefGetRequest,
    BriefReviewRequest,
    BriefReviseRequest,
    ChunkSearchRequest,
    ImageGetRequest,
    ImageSearchRequest,
)
from worker import clock
from worker.store import briefs, db
from worker.store import chunks as chunk_store
from worker.store import images as image_store


def search_chunks(
    session: Session, principal: Principal, request: ChunkSearchRequest
) -> dict[str, Any]:
    """research_chunk_search: ranked passages of the workspace."""
    principal.require(None)
    if not principal.can_read(request.workspace):
        return {"result": {"chunks": []}}
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
    images = image_store.search_images(
        session, request.workspace, request.query, limit=request.limit
    )
    return {"result": {"images": images}}


def find_image(
    session: Session, principal: Principal, request: ImageGetRequest
) -> dict[str, Any] | None:
    """research_get_image's lookup: the image, or None for an id this key cannot see."""
    principal.require(None)
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
        brief = briefs.read_brief(
            session, request.workspace, uuid.UUID(request.id), request.revision
        )
    if brief is None:
        raise not_found("no such brief")
    return {"brief": brief}


def bad_evidence(exc: briefs.BadEvidence) -> ApiError:
    """A citation of evidence the workspace does not hold: 400 naming the field (the contract)."""
    return invalid_input(
        "each evidence reference must name an evidence revision of this workspace",
        field=exc.field,
    )


def _write(
    principal: Principal,
    workspace_id: uuid.UUID,
    brief_id: uuid.UUID,
    fn: Callable[[Session], int | None],
) -> dict[str, Any]:
    """Run a brief write in its own transaction, translating the store's refusals."""
    principal.require(None)
    if not principal.can_read(workspace_id):
        raise not_found("no such brief")
    try:
        written = db.with_transient_retry(fn)
    except briefs.BriefMissing:
        raise not_found("no such brief") from None
    except briefs.BadEvidence as exc:
        raise bad_evidence(exc) from None
    except briefs.StaleRevision:
        raise invalid_input(
            "the brief has changed since expected_revision; read it and retry",
            field="expected_revision",
            status=409,
        ) from None
    except briefs.BriefArchived:
        raise invalid_input("the brief is archived", field="id", status=409) from None
    except briefs.UnknownRevision:
        raise invalid_input(
            "the brief has no such revision", field="revision", status=409
        ) from None
    return _read_written(workspace_id, brief_id, written if isinstance(written, int) else None)


def _read_written(
    workspace_id: uuid.UUID, brief_id: uuid.UUID, revision: int | None = None
) -> dict[str, Any]:
    """The brief as a write left it (at the revision the write made, for revise)."""
    with db.session_scope(readonly=True) as session:
        return {"brief": briefs.read_brief(session, workspace_id, brief_id, revision)}


def create_brief(principal: Principal, request: BriefCreateRequest) -> dict[str, Any]:
    """Create a brief at revision 1."""
    principal.require(request.workspace)
    content = request.content.model_dump(mode="json")
    created: list[uuid.UUID] = []

    def _create(session: Session) -> None:
        created[:] = [briefs.create_brief(session, request.workspace, content, clock.now())]

    try:
        db.with_transient_retry(_create)
    except briefs.BadEvidence as exc:
        raise bad_evidence(exc) from None
    return _read_written(request.workspace, created[0], 1)


def revise_brief(principal: Principal, request: BriefReviseRequest) -> dict[str, Any]:
    """Add a revision on top of `expected_revision` (409 when stale)."""
    brief_id, content = uuid.UUID(request.id), request.content.model_dump(mode="json")
    return _write(
        principal,
        request.workspace,
        brief_id,
        lambda s: briefs.revise_brief(
            s, request.workspace, brief_id, request.expected_revision, content, clock.now()
        ),
    )


def review_brief(principal: Principal, request: BriefReviewRequest) -> dict[str, Any]:
    """Mark a revision as reviewed."""
    brief_id = uuid.UUID(request.id)
    return _write(
        principal,
        request.workspace,
        brief_id,
        lambda s: briefs.review_brief(
            s, request.workspace, brief_id, request.revision, clock.now()
        ),
    )


def archive_brief(principal: Principal, request: BriefArchiveRequest) -> dict[str, Any]:
    """Archive a brief."""
    brief_id = uuid.UUID(request.id)
    return _write(
        principal,
        request.workspace,
        brief_id,
        lambda s: briefs.archive_brief(s, request.workspace, brief_id, clock.now()),
    )

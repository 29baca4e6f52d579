"""Brief writes (create, revise, review, archive), each in its own transaction.

The store's refusals become the contract's errors here; reading a brief is
`api.services.read.get_brief`. Like every read, a brief in a workspace the key cannot see is
answered as unknown (404), so existence never leaks.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, cast

from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import invalid_input, not_found
from api.read_schemas import (
    BriefArchiveRequest,
    BriefContent,
    BriefCreateRequest,
    BriefReviewRequest,
    BriefReviseRequest,
)
from worker.domain import clock
from worker.store import briefs as brief_store
from worker.store import db


def _content(content: BriefContent) -> brief_store.BriefContent:
    """The request's content as the store takes it (the model has exactly the contract's keys)."""
    return cast(brief_store.BriefContent, content.model_dump(mode="json"))


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
    except brief_store.BriefMissing:
        raise not_found("no such brief") from None
    except brief_store.BadEvidence as exc:
        raise invalid_input(
            "each evidence reference must name an evidence revision of this workspace",
            field=exc.field,
        ) from None
    except brief_store.StaleRevision:
        raise invalid_input(
            "the brief has changed since expected_revision; read it and retry",
            field="expected_revision",
            status=409,
        ) from None
    except brief_store.BriefArchived:
        raise invalid_input("the brief is archived", field="id", status=409) from None
    except brief_store.UnknownRevision:
        raise invalid_input(
            "the brief has no such revision", field="revision", status=409
        ) from None
    return _read_written(workspace_id, brief_id, written if isinstance(written, int) else None)


def _read_written(
    workspace_id: uuid.UUID, brief_id: uuid.UUID, revision: int | None = None
) -> dict[str, Any]:
    """The brief as a write left it (at the revision the write made, for revise)."""
    with db.session_scope(readonly=True) as session:
        return {"brief": brief_store.read_brief(session, workspace_id, brief_id, revision)}


def create_brief(principal: Principal, request: BriefCreateRequest) -> dict[str, Any]:
    """Create a brief at revision 1."""
    principal.require(request.workspace)
    content = _content(request.content)
    created: list[uuid.UUID] = []

    def _create(session: Session) -> None:
        created[:] = [brief_store.create_brief(session, request.workspace, content, clock.now())]

    try:
        db.with_transient_retry(_create)
    except brief_store.BadEvidence as exc:
        raise invalid_input(
            "each evidence reference must name an evidence revision of this workspace",
            field=exc.field,
        ) from None
    return _read_written(request.workspace, created[0], 1)


def revise_brief(principal: Principal, request: BriefReviseRequest) -> dict[str, Any]:
    """Add a revision on top of `expected_revision` (409 when stale)."""
    brief_id, content = uuid.UUID(request.id), _content(request.content)
    return _write(
        principal,
        request.workspace,
        brief_id,
        lambda s: brief_store.revise_brief(
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
        lambda s: brief_store.review_brief(
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
        lambda s: brief_store.archive_brief(s, request.workspace, brief_id, clock.now()),
    )

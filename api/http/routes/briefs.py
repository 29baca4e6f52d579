"""Research briefs: read at a revision, create, revise, review, archive."""

from typing import Any

from fastapi import APIRouter

from api.http.deps import PrincipalDep, SessionDep
from api.read_schemas import (
    BriefArchiveRequest,
    BriefCreateRequest,
    BriefGetRequest,
    BriefReviewRequest,
    BriefReviseRequest,
)
from api.services import briefs, read

router = APIRouter(prefix="/research-api/briefs", tags=["briefs"])


@router.post("/get")
def get(body: BriefGetRequest, principal: PrincipalDep, session: SessionDep) -> dict[str, Any]:
    """A brief at its latest revision, or at `revision`."""
    return read.get_brief(session, principal, body)


@router.post("/create")
def create(body: BriefCreateRequest, principal: PrincipalDep) -> dict[str, Any]:
    """Create a brief at revision 1."""
    return briefs.create_brief(principal, body)


@router.post("/revise")
def revise(body: BriefReviseRequest, principal: PrincipalDep) -> dict[str, Any]:
    """Add a revision; 409 when expected_revision is stale."""
    return briefs.revise_brief(principal, body)


@router.post("/review")
def review(body: BriefReviewRequest, principal: PrincipalDep) -> dict[str, Any]:
    """Mark a revision as reviewed."""
    return briefs.review_brief(principal, body)


@router.post("/archive")
def archive(body: BriefArchiveRequest, principal: PrincipalDep) -> dict[str, Any]:
    """Archive a brief."""
    return briefs.archive_brief(principal, body)

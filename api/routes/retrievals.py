"""Routes of the retrieval lifecycle."""

import uuid
from typing import Any

from fastapi import APIRouter, Response

from api import service
from api.deps import PrincipalDep, SessionDep
from api.schemas import RetrieveRequest

router = APIRouter(prefix="/research-api/evidence", tags=["evidence"])


@router.post("/retrieve", status_code=202)
def retrieve(body: RetrieveRequest, principal: PrincipalDep, response: Response) -> dict[str, Any]:
    """Record a retrieval (202), or return the one this mutation_id already made (200)."""
    payload, created = service.submit_retrieval(principal, body)
    response.status_code = 202 if created else 200
    return payload


@router.get("/retrievals/{retrieval_id}")
def get_retrieval(
    retrieval_id: uuid.UUID, principal: PrincipalDep, session: SessionDep
) -> dict[str, Any]:
    """The retrieval as it stands now."""
    return service.read_retrieval(session, principal, retrieval_id)


@router.post("/retrievals/{retrieval_id}/cancel")
def cancel_retrieval(retrieval_id: uuid.UUID, principal: PrincipalDep) -> dict[str, Any]:
    """Cancel a pending or running retrieval."""
    return service.cancel_retrieval(principal, retrieval_id)

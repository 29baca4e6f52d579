"""Routes that read evidence revisions."""

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Query

from api.http.deps import PrincipalDep, SessionDep
from api.services import retrievals

router = APIRouter(prefix="/research-api/evidence", tags=["evidence"])


@router.get("/{evidence_id}")
def get_evidence(
    evidence_id: uuid.UUID,
    principal: PrincipalDep,
    session: SessionDep,
    revision: Annotated[int | None, Query(ge=1)] = None,
) -> dict[str, Any]:
    """One evidence revision (latest by default) and the list of its revisions."""
    return retrievals.read_evidence(session, principal, evidence_id, revision)

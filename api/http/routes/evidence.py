"""Routes that read evidence revisions."""

from typing import Annotated, Any

from fastapi import APIRouter, Query

from api.http.deps import PrincipalDep, SessionDep
from api.schemas import UuidParam
from api.services import retrievals

router = APIRouter(prefix="/research-api/evidence", tags=["evidence"])


@router.get("/{evidence_id}")
def get_evidence(
    evidence_id: UuidParam,
    principal: PrincipalDep,
    session: SessionDep,
    revision: Annotated[int | None, Query(ge=1)] = None,
) -> dict[str, Any]:
    """One evidence revision (latest by default) and the list of its revisions."""
    return retrievals.read_evidence(session, principal, evidence_id, revision)

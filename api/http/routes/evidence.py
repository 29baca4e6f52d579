"""Routes that read evidence revisions."""

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from api.http.deps import PrincipalDep, SessionDep
from api.read_schemas import MAX_SAFE_INTEGER
from api.schemas import UuidParam
from api.services import evidence_diff, retrievals

router = APIRouter(prefix="/research-api/evidence", tags=["evidence"])


# Only a UUID matches here, so `/retrieve` and `/retrievals` are not read as evidence ids: a
# GET there is 405 (with `Allow`), not a 400 about a malformed id.
@router.get("/{evidence_id:uuid}")
def get_evidence(
    evidence_id: UuidParam,
    principal: PrincipalDep,
    session: SessionDep,
    # Bounded as revisions are everywhere: a larger integer overflowed SQLite's (a 500).
    revision: Annotated[int | None, Query(ge=1, le=MAX_SAFE_INTEGER)] = None,
) -> dict[str, Any]:
    """One evidence revision (latest by default) and the list of its revisions."""
    return retrievals.read_evidence(session, principal, evidence_id, revision)


@router.get("/{evidence_id:uuid}/diff")
async def diff_evidence(
    evidence_id: UuidParam,
    principal: PrincipalDep,
    old: Annotated[int, Query(alias="from", ge=1, le=MAX_SAFE_INTEGER)],
    new: Annotated[int, Query(alias="to", ge=1, le=MAX_SAFE_INTEGER)],
) -> Response:
    """What changed from revision `from` to revision `to` of one evidence item.

    Async, and with no request session: the work runs in the diff pool, bounded per workspace
    (`api.services.evidence_diff`), and its answer comes back as JSON already rendered.
    """
    body = await evidence_diff.diff_json(principal, evidence_id, old, new)
    return Response(body, media_type="application/json")

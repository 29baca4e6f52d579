"""Routes that read evidence revisions."""

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from api.http.deps import PrincipalDep, SessionDep
from api.http.routes import evidence_archive as archive_routes
from api.http.routes import memento as memento_routes
from api.read_schemas import MAX_SAFE_INTEGER, QuoteVerifyRequest
from api.schemas import UuidParam
from api.services import evidence_diff, memento, quotes, retrievals

router = APIRouter(prefix="/research-api/evidence", tags=["evidence"])


# Only a UUID matches here, so `/retrieve` and `/retrievals` are not read as evidence ids: a
# GET there is 405 (with `Allow`), not a 400 about a malformed id.
@router.get("/{evidence_id:uuid}")
def get_evidence(
    evidence_id: UuidParam,
    principal: PrincipalDep,
    session: SessionDep,
    request: Request,
    response: Response,
    # Bounded as revisions are everywhere: a larger integer overflowed SQLite's (a 500).
    revision: Annotated[int | None, Query(ge=1, le=MAX_SAFE_INTEGER)] = None,
) -> dict[str, Any]:
    """One evidence revision (latest by default) and the list of its revisions.

    Named by `revision`, the answer is that revision's memento (RFC 7089): `Memento-Datetime`
    and a `Link` to the original URL, its TimeGate and its TimeMap (docs/memento.md)."""
    payload = retrievals.read_evidence(session, principal, evidence_id, revision)
    if revision is not None:
        item = payload["evidence"]
        created_at = datetime.fromisoformat(item["created_at"])
        base = memento_routes.base_of(request)
        headers = memento.revision_headers(item["workspace_id"], item["url"], created_at, base)
        response.headers.update(headers)
    return payload


# Memento clients ask a URI-M with HEAD: the same answer without its body (undocumented, as
# HEAD is implied by GET).
router.add_api_route("/{evidence_id:uuid}", get_evidence, methods=["HEAD"], include_in_schema=False)


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


@router.post("/quotes/verify")
def verify_quotes(
    body: QuoteVerifyRequest, principal: PrincipalDep, session: SessionDep
) -> dict[str, Any]:
    """Check up to 100 quotes against evidence revisions of the workspace: for each, the match
    (`exact`, `normalized`, `fuzzy` with its score, or `none`), its `[start, end)` in the
    revision's text (code points), the chunks and caption cues it spans, a text-fragment link
    to the live page and a link to the revision. docs/quotes.md says how."""
    return quotes.verify_quotes(session, principal, body)


router.include_router(memento_routes.router)
router.include_router(archive_routes.router)

"""Routes of the retrieval lifecycle."""

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.http.deps import PrincipalDep, read_only_session
from api.schemas import RetrieveRequest, UuidParam
from api.services import retrievals
from api.services.payloads import RetrievalPayload

router = APIRouter(prefix="/research-api/evidence", tags=["evidence"])


# Payloads are built JSON-safe (`api.services.payloads`), so routes answer them as they are
# instead of letting FastAPI walk every field (up to 20 000 characters of text) through its encoder.
# The routes are plain `def`s, so each runs in one worker thread; the principal comes from an
# async dependency, and the GET opens its own session, so no other thread hop is needed.


def _answer(payload: RetrievalPayload, status: int = 200) -> JSONResponse:
    """The retrieval; while it is open, a `Retry-After` telling a poller when to ask again."""
    seconds = retrievals.retry_after(payload)
    headers = None if seconds is None else {"Retry-After": str(seconds)}
    return JSONResponse(payload, status_code=status, headers=headers)


@router.post("/retrieve", status_code=202, response_class=JSONResponse)
def retrieve(body: RetrieveRequest, principal: PrincipalDep) -> JSONResponse:
    """Record a retrieval (202), or return the one this mutation_id already made (200)."""
    payload, created = retrievals.submit_retrieval(principal, body)
    return _answer(payload, 202 if created else 200)


@router.get("/retrievals/{retrieval_id}", response_class=JSONResponse)
def get_retrieval(retrieval_id: UuidParam, principal: PrincipalDep) -> JSONResponse:
    """The retrieval as it stands now."""
    with read_only_session() as session:
        payload = retrievals.read_retrieval(session, principal, retrieval_id)
    return _answer(payload)


@router.post("/retrievals/{retrieval_id}/cancel", response_class=JSONResponse)
def cancel_retrieval(retrieval_id: UuidParam, principal: PrincipalDep) -> JSONResponse:
    """Cancel a pending or running retrieval."""
    return _answer(retrievals.cancel_retrieval(principal, retrieval_id))

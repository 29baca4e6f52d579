"""Routes of the retrieval lifecycle, single and batch."""

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse
from starlette.background import BackgroundTask
from starlette.convertors import StringConvertor, register_url_convertor

from api.http.deps import PrincipalDep
from api.schemas import (
    BatchGetRequest,
    BatchGetResponse,
    BatchRetrieveRequest,
    BatchRetrieveResponse,
    ErrorResponse,
    RetrieveRequest,
    UuidParam,
)
from api.services import poll_advice, read_admission, retrievals, thread_pools, waiters
from api.services import retrieve_batch as batch
from api.services.cache_control import parse_max_age
from api.services.evidence_payload import RetrievalDoc, RetrievalPayload
from worker.domain.states import OPEN_STATES, RetrievalState
from worker.store.db import read_only_session


class _RetrievalIdConvertor(StringConvertor):
    regex = "(?!batch-get$)[^/]+"


register_url_convertor("retrieval_id", _RetrievalIdConvertor())

router = APIRouter(prefix="/research-api/evidence", tags=["evidence"])

# Payloads are built JSON-safe (`api.services.evidence_payload`), so routes answer them as they are
# instead of letting FastAPI walk every field (up to 20 000 characters of text) through its encoder.
# The write routes are plain `def`s, so each runs in one worker thread; the principal comes from
# an async dependency. The reads are `async def`s that take a worker thread only to read the
# database, so a long-poll (`Prefer: wait=N`) waits in the event loop, holding no thread.

PreferHeader = Annotated[
    list[str] | None,
    Header(
        description="RFC 7240. `wait=N` (seconds, at most 30): answer as soon as the "
        "retrieval settles, or as it stands after N seconds.",
    ),
]
CacheControlHeader = Annotated[
    list[str] | None,
    Header(
        description="RFC 9111. `max-age=N` (seconds): a reuse window. If the source's latest "
        "evidence revision was fetched or confirmed at most N seconds before a worker takes "
        "the retrieval up, it completes from that revision without a fetch. Other directives "
        "are ignored.",
    ),
]
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 403, 404, 409, 429, 503)
}


def _answer(payload: RetrievalPayload, status: int, retry_after: int | None) -> JSONResponse:
    """The retrieval; while it is open, a `Retry-After` telling a poller when to ask again."""
    headers = None if retry_after is None else {"Retry-After": str(retry_after)}
    return JSONResponse(payload, status_code=status, headers=headers)


def _applied(response: JSONResponse, wait: int | None) -> JSONResponse:
    response.headers["Vary"] = "Prefer"
    if wait is not None:
        response.headers["Preference-Applied"] = f"wait={wait}"
    return response


@router.post("/retrieve", status_code=202, response_class=JSONResponse)
def retrieve(
    body: RetrieveRequest, principal: PrincipalDep, cache_control: CacheControlHeader = None
) -> JSONResponse:
    """Record a retrieval (202), or return the one this mutation_id already made (200)."""
    max_age = parse_max_age(cache_control)
    submitted = retrievals.submit_retrieval(principal, body, max_age, publish_later=True)
    retry_after = retrievals.retry_after(submitted.payload, submitted.lane)
    # The first advice on it: a poll straight after this answer is as early as any other.
    retrieval_id = uuid.UUID(submitted.payload["retrieval"]["id"])
    running = _running(submitted.payload["retrieval"])
    poll_advice.given(principal.key_id, retrieval_id, retry_after, running)
    answer = _answer(submitted.payload, 202 if submitted.created else 200, retry_after)

    # Once the answer is sent (it waits for the commit only): published, then the advice
    # shared. A process that dies in between leaves the pending row to the sweep
    # (`EVIDENCE_REPUBLISH_AFTER_SECONDS`).
    def after_answer() -> None:
        if submitted.unpublished is not None:
            retrievals.publish_new(submitted.unpublished, submitted.lane)
        poll_advice.share(principal.key_id, retrieval_id, retry_after, running)

    answer.background = BackgroundTask(after_answer)
    return answer


@router.post(
    "/retrieve/batch",
    response_class=JSONResponse,
    responses={200: {"model": BatchRetrieveResponse}, **ERRORS},
)
def retrieve_batch(
    body: BatchRetrieveRequest, principal: PrincipalDep, cache_control: CacheControlHeader = None
) -> JSONResponse:
    """Record up to 1 000 retrievals at once (batch lane); one result per item, in order.

    Each item is answered as `POST /retrieve` would answer it alone: `{"status": 202|200,
    "retrieval": …}` or `{"status": 400|403|409|429, "error": …}`. The batch itself is 200
    whenever its envelope is valid; with items refused for a quota it carries the longest of
    their `Retry-After`s.
    """
    results = batch.submit_batch(principal, body.items, parse_max_age(cache_control))
    waits = [r["error"]["details"]["retry_after_seconds"] for r in results if r["status"] == 429]
    headers = {"Retry-After": str(max(waits))} if waits else None
    return JSONResponse({"results": results}, headers=headers)


# `retrieval_id` is any path segment but `batch-get` (its POST route's): an odd id there is a
# 400 naming it, while another method on /retrievals/batch-get is a 405 with `Allow: POST`.
@router.get("/retrievals/{retrieval_id:retrieval_id}", response_class=JSONResponse)
async def get_retrieval(
    retrieval_id: UuidParam, principal: PrincipalDep, prefer: PreferHeader = None
) -> JSONResponse:
    """The retrieval as it stands now; with `Prefer: wait=N`, once it settles (or after N s)."""

    def plain_read() -> tuple[RetrievalPayload, int | None]:
        with read_only_session() as session:
            answer = retrievals.read_retrieval_advised(session, principal, retrieval_id)
        # Shared for the other API processes from this thread, before the answer leaves: from
        # the event loop after it (a background task, the asyncio client) it cost a fifth of a
        # GET's CPU (docs/measurements.md).
        running = _running(answer[0]["retrieval"])
        poll_advice.share(principal.key_id, retrieval_id, answer[1], running)
        return answer

    # Admitted per workspace (api.services.read_admission): an early poll is refused from memory,
    # a refusal is held before it is answered, and a long-poll takes its token once.
    charged = read_admission.workspace_for(principal, retrieval_id)
    read = read_admission.charged_once(
        plain_read,
        principal,
        charged,
        str(retrieval_id),
        lambda answer: _owners([answer[0]["retrieval"]]),
    )
    wait = waiters.parse_prefer_wait(prefer or ())
    run = thread_pools.reads.runner(charged or principal.key_id)
    async with read_admission.held():
        if charged is not None:
            read_admission.check(charged, str(retrieval_id), holds=True)
        if wait is None:
            if charged is not None:  # early, from a workspace polling early in a loop
                await poll_advice.wait_for_advice(principal.key_id, charged, retrieval_id)
            payload, retry_after = await run(read)
        else:
            payload, retry_after = await waiters.wait_until(
                read, [str(retrieval_id)], lambda got: _settled(got[0]["retrieval"]), wait, run
            )
    poll_advice.given(principal.key_id, retrieval_id, retry_after, _running(payload["retrieval"]))
    return _applied(_answer(payload, 200, retry_after), wait)


@router.post(
    "/retrievals/batch-get",
    response_class=JSONResponse,
    responses={200: {"model": BatchGetResponse}, **ERRORS},
)
async def batch_get(
    body: BatchGetRequest, principal: PrincipalDep, prefer: PreferHeader = None
) -> JSONResponse:
    """Up to 1 000 retrievals by id, in order; unknown or unreadable ids are null.

    With `Prefer: wait=N` it answers as soon as one of the retrievals that were open settles
    (or after N s): a client watching many retrievals learns of each settlement without polling.
    """
    ids = [uuid.UUID(text) for text in body.ids]

    def plain_read() -> list[RetrievalDoc | None]:
        with read_only_session() as session:
            return retrievals.read_retrievals(session, principal, ids)

    charged = read_admission.workspace_for(principal)
    subject = read_admission.ids_subject(ids)
    tokens = read_admission.batch_get_tokens(len(ids))
    read = read_admission.charged_once(plain_read, principal, charged, subject, _owners, tokens)
    first_open: list[int] = []

    def changed(answer: list[RetrievalDoc | None]) -> bool:
        still_open = sum(1 for item in answer if item is not None and not _settled(item))
        if not first_open:
            first_open.append(still_open)
        return still_open == 0 or still_open < first_open[0]

    wait = waiters.parse_prefer_wait(prefer or ())
    run = thread_pools.reads.runner(charged or principal.key_id)
    async with read_admission.held():
        if charged is not None:
            read_admission.check(charged, subject, holds=True)
        if wait is None:
            found = await run(read)
        else:
            found = await waiters.wait_until(read, [str(i) for i in ids], changed, wait, run)
    return _applied(JSONResponse({"retrievals": found}), wait)


@router.post("/retrievals/{retrieval_id}/cancel", response_class=JSONResponse)
def cancel_retrieval(retrieval_id: UuidParam, principal: PrincipalDep) -> JSONResponse:
    """Cancel a pending or running retrieval."""
    payload = retrievals.cancel_retrieval(principal, retrieval_id)
    return _answer(payload, 200, retrievals.retry_after(payload))


def _owners(found: list[RetrievalDoc | None]) -> dict[uuid.UUID, uuid.UUID]:
    """The workspace of each retrieval read (what read admission charges and learns)."""
    return {uuid.UUID(r["id"]): uuid.UUID(r["workspace_id"]) for r in found if r is not None}


def _running(retrieval: RetrievalDoc) -> bool:
    return retrieval["state"] == RetrievalState.RUNNING.value


def _settled(retrieval: RetrievalDoc) -> bool:
    return retrieval["state"] not in OPEN_STATES

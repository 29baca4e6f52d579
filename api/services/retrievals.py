"""What the routes and the MCP tools do, as plain functions over a session and a principal."""

from __future__ import annotations

import contextlib
import math
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from api.auth import Principal, authenticate
from api.errors import ApiError, invalid_input, not_found
from api.http.metrics import RETRIEVALS_CREATED
from api.schemas import RetrieveRequest
from api.services.payloads import RetrievalPayload, evidence_payload, retrieval_payload
from worker import clock
from worker.jobs import outbox
from worker.settings import get_settings
from worker.states import RetrievalState as S
from worker.store import db, retrievals
from worker.store import evidence as evidence_store

log = structlog.get_logger(__name__)

#: Polls of pending retrievals the API invites per second, fleet-wide: each is told to come
#: back after (pending retrievals / this) seconds, so the poll load stays near this rate however
#: deep the backlog grows, instead of growing with it.
POLLS_PER_SECOND = 50
#: Bounds of that advice: a running retrieval is asked again after a second (it settles within
#: its fetch deadline), and no poller is told to wait longer than the maximum.
MIN_RETRY_AFTER_SECONDS = 1
MAX_RETRY_AFTER_SECONDS = 120
#: Relative spread of the advice for pending retrievals (see `poll_delay`).
JITTER = 0.5
#: How often each API process re-counts the pending retrievals (one indexed count).
BACKLOG_CACHE_SECONDS = 1.0
#: Pooled database connections an API process opens at start (the pool keeps up to this many).
WARM_CONNECTIONS = 10


def submit_retrieval(
    principal: Principal, request: RetrieveRequest
) -> tuple[RetrievalPayload, bool]:
    """Record the retrieval (or find it), publish it if new; return (payload, created)."""
    principal.require(request.workspace)
    ttl = timedelta(seconds=get_settings().receipt_ttl_seconds)
    new = retrievals.NewRetrieval(
        workspace_id=request.workspace,
        mutation_id=request.mutation,
        url=request.url,
        kind=request.kind,
        language=request.language,
    )
    try:
        row, created = db.with_transient_retry(
            lambda s: retrievals.create_retrieval(s, new, clock.now(), ttl)
        )
    except retrievals.MutationConflict:
        raise invalid_input(
            "this mutation_id was already used with a different url, kind or language",
            field="mutation_id",
            status=409,
        ) from None
    if created:
        RETRIEVALS_CREATED.labels(row.kind).inc()
        backlog.created()
        ids = {"retrieval_id": str(row.id), "workspace_id": str(row.workspace_id)}
        with structlog.contextvars.bound_contextvars(**ids):
            log.info("retrieval_created", kind=row.kind)
            if not outbox.publish([row.id]):
                db.with_transient_retry(lambda s: retrievals.mark_unpublished(s, row.id))
                row.published_at = None
    return retrieval_payload(row), created


def read_retrieval(
    session: Session, principal: Principal, retrieval_id: uuid.UUID
) -> RetrievalPayload:
    """The retrieval as it stands; 404 when unknown or outside the key's workspaces."""
    principal.require(None)
    row = retrievals.read_row(session, retrieval_id)
    if row is None or not principal.can_read(row.workspace_id):
        raise not_found("no such retrieval")
    return retrieval_payload(row)  # type: ignore[arg-type]  # a row has the model's attributes


def cancel_retrieval(principal: Principal, retrieval_id: uuid.UUID) -> RetrievalPayload:
    """Cancel a pending or running retrieval; a settled one is returned unchanged."""
    principal.require(None)

    def _cancel(session: Session) -> RetrievalPayload:
        row = retrievals.get_retrieval(session, retrieval_id)
        if row is None or not principal.can_read(row.workspace_id):
            raise not_found("no such retrieval")
        cancelled = retrievals.cancel(session, row, clock.now())
        if cancelled is None:  # already settled, perhaps since we read it: answer it as it is
            cancelled = retrievals.get_retrieval(session, retrieval_id)
        return retrieval_payload(cancelled)  # type: ignore[arg-type]

    return db.with_transient_retry(_cancel)


def read_evidence(
    session: Session, principal: Principal, evidence_id: uuid.UUID, revision: int | None
) -> dict[str, Any]:
    """One evidence revision (latest by default) with the list of revisions."""
    principal.require(None)
    evidence = evidence_store.get_evidence(session, evidence_id)
    if evidence is None or not principal.can_read(evidence.workspace_id):
        raise not_found("no such evidence")
    row = evidence_store.get_revision(session, evidence_id, revision)
    if row is None:
        raise not_found("no such revision")
    return evidence_payload(evidence, row, evidence_store.list_revisions(session, evidence_id))


def poll_delay(state: str, pending: int, rand: Callable[[], float] = random.random) -> int | None:
    """Seconds a poller should wait before asking about a retrieval again; None once settled.

    Jittered by ±JITTER, so that polls answered in the same second do not all come back in the
    same second (docs/performance.md, "The API").
    """
    if state == S.RUNNING.value:
        return MIN_RETRY_AFTER_SECONDS
    if state != S.PENDING.value:
        return None
    spread = 1 - JITTER + 2 * JITTER * rand()
    seconds = math.ceil(pending / POLLS_PER_SECOND * spread)
    return min(MAX_RETRY_AFTER_SECONDS, max(MIN_RETRY_AFTER_SECONDS, seconds))


class _Backlog:
    """The number of pending retrievals, re-counted at most every BACKLOG_CACHE_SECONDS.

    Between counts it adds the retrievals created since, or a fast-growing backlog is counted
    too low and its polls all come back early. A process sees only its share of them, so it
    scales what it saw by the number of API processes (`api_workers`).
    """

    def __init__(self) -> None:
        self._pending = 0
        self._created_since = 0
        self._counted_at = -math.inf
        self._lock = threading.Lock()

    def pending(self) -> int:
        """The last count plus what was created here since; one caller re-counts when stale."""
        stale = time.monotonic() - self._counted_at >= BACKLOG_CACHE_SECONDS
        if stale and self._lock.acquire(blocking=False):
            try:
                created_before = self._created_since
                self._pending = _count_pending()
                self._created_since -= created_before
            except SQLAlchemyError:
                pass  # keep the last count: advice must never fail the answer it rides on
            finally:
                self._counted_at = time.monotonic()
                self._lock.release()
        return self._pending + self._created_since * get_settings().api_workers

    def created(self) -> None:
        """Note a retrieval this process just created (pending until a worker claims it)."""
        self._created_since += 1  # not atomic across threads: a rare lost one only softens advice

    def clear(self) -> None:
        self._counted_at = -math.inf
        self._created_since = 0


def _count_pending() -> int:
    with db.session_scope(readonly=True) as session:
        return retrievals.count_pending(session)


backlog = _Backlog()


def retry_after(payload: RetrievalPayload) -> int | None:
    """The `Retry-After` for an answer carrying this retrieval payload; None once it settled."""
    state = payload["retrieval"]["state"]
    return poll_delay(state, backlog.pending() if state == S.PENDING.value else 0)


def warm_up() -> None:
    """Open at start what the first requests would otherwise open under load, best effort.

    A database or broker that is down now is the requests' business (503, or the sweep
    publishes later), not startup's. What a cold first request costs: docs/performance.md.
    """
    from worker.jobs.celery_app import PUBLISH_CONNECT_TIMEOUT_SECONDS
    from worker.jobs.celery_app import app as celery

    try:
        engine = db.get_engine()
        size = getattr(engine.pool, "size", lambda: 1)()
        connections = [engine.connect() for _ in range(min(size, WARM_CONNECTIONS))]
        for connection in connections:
            connection.close()  # back to the pool, open
        with db.read_session() as session:
            retrievals.read_row(session, uuid.uuid4())
            with contextlib.suppress(ApiError):  # compiles the key lookup; no such key: 401
                authenticate(session, "Bearer warm-up")
        backlog.pending()
        celery.finalize()
        with celery.pool.acquire(block=True, timeout=PUBLISH_CONNECT_TIMEOUT_SECONDS) as broker:
            broker.ensure_connection(max_retries=0, timeout=PUBLISH_CONNECT_TIMEOUT_SECONDS)
    except Exception as exc:  # noqa: BLE001  (best effort: never stops the API from starting)
        log.warning("warm_up_incomplete", error=type(exc).__name__)

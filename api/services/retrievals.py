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
from typing import Any, NamedTuple

import structlog
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from api.auth import Principal, authenticate
from api.errors import ApiError, invalid_input, not_found
from api.schemas import RetrieveRequest
from api.services import admission as quotas
from api.services import read_admission
from api.services.counters import RETRIEVALS_CREATED
from api.services.evidence_access import readable_revision
from api.services.evidence_payload import (
    RetrievalDoc,
    RetrievalPayload,
    evidence_payload,
    retrieval_payload,
)
from worker.domain import clock
from worker.domain.states import RetrievalState as S
from worker.jobs import (
    outbox,
    webhook_outbox,  # noqa: F401  (publishes the deliveries a cancel records)
)
from worker.jobs.celery_app import PUBLISH_CONNECT_TIMEOUT_SECONDS
from worker.jobs.celery_app import app as celery
from worker.platform.settings import get_settings
from worker.retrieval import notify, publication, single_retrieval, transitions
from worker.retrieval import records as retrievals
from worker.retrieval.freshness import sources
from worker.store import db, retrieval_view
from worker.store import evidence as evidence_store
from worker.store.models import LANE_INTERACTIVE

log = structlog.get_logger(__name__)

#: Polls the API invites per second: of pending retrievals fleet-wide, each told to come back
#: after (pending retrievals / this) seconds, and of running ones per workspace, each told
#: (the workspace's running retrievals / this) seconds; so the poll load stays near this rate
#: however deep the backlog grows and however many of a workspace's retrievals run at once.
#: A client working through its open retrievals one after another polls each about as the
#: advice says, so this rate is what its polls cost the API (at 50 the overload bench's
#: pollers took twice the CPU from a saturated worker: docs/measurements.md). With the jitter,
#: up to 16 running are each told 1 s, and an agent's 20 interactive ones 1 or 2 s.
POLLS_PER_SECOND = 25
#: Bounds of that advice: a workspace's one running retrieval is asked again after a second
#: (it settles within its fetch deadline), and no poller is told to wait longer than the
#: maximum (for a running retrieval, the long-poll's bound).
MIN_RETRY_AFTER_SECONDS = 1
MAX_RETRY_AFTER_SECONDS = 120
MAX_RUNNING_RETRY_AFTER_SECONDS = 30
#: Relative spread of the advice (see `poll_delay`).
JITTER = 0.5
#: How often each API process re-counts the pending retrievals (one indexed count).
BACKLOG_CACHE_SECONDS = 1.0
#: Pooled database connections an API process opens at start (the pool keeps up to this many).
WARM_CONNECTIONS = 10


def new_retrieval(request: RetrieveRequest, max_age: int | None = None) -> retrievals.NewRetrieval:
    """What a retrieve body (and a `Cache-Control: max-age`) asks the store to record."""
    return retrievals.NewRetrieval(
        workspace_id=request.workspace,
        mutation_id=request.mutation,
        url=request.url,
        kind=request.kind,
        language=request.language,
        max_age_seconds=max_age,
    )


def conflict_error() -> ApiError:
    """The 409 of a known mutation_id sent with another url, kind or language."""
    return invalid_input(
        "this mutation_id was already used with a different url, kind or language",
        field="mutation_id",
        status=409,
    )


class Submitted(NamedTuple):
    """A single submission's answer: the payload, whether it was created, and its lane."""

    payload: RetrievalPayload
    created: bool
    lane: str
    #: A new retrieval's id, while its message is still to be published (`publish_later`).
    unpublished: uuid.UUID | None = None


def submit_retrieval(
    principal: Principal,
    request: RetrieveRequest,
    max_age: int | None = None,
    publish_later: bool = False,
) -> Submitted:
    """Record a single retrieval (or find it), publish it if new; its payload, whether it was
    created, and its lane. With `publish_later`, a new one's id is returned unpublished: the
    caller publishes it (`publish_new`) once its answer is sent.

    A retrieval submitted alone goes to the interactive lane, unless its workspace already has
    `interactive_open_limit` open ones there (then it joins the batch lane). Quotas: one token
    of the workspace's write rate, and room under its open ceiling (a replay needs none).
    """
    principal.require(request.workspace)
    # A replay is a poll: it takes a read token, before the database when this process has
    # answered the mutation before (a refused one from memory), else once the replay is known.
    replay = read_admission.replay_subject(request.workspace, request.mutation)
    paid = replay is not None
    if paid:
        read_admission.admit(request.workspace, replay)
    settings = get_settings()
    limits = quotas.limits_for(request.workspace)
    grant = quotas.limiter.take(request.workspace, 1, limits)
    ttl = timedelta(seconds=settings.receipt_ttl_seconds)
    new = new_retrieval(request, max_age)
    try:
        row, created = single_retrieval.record_single(
            new,
            clock.now(),
            ttl,
            limits.open_retrievals,
            settings.interactive_open_limit,
            rate_ok=grant.granted == 1,
        )
    except retrievals.MutationConflict:
        quotas.limiter.refund(request.workspace, grant.granted, limits)
        raise conflict_error() from None
    except retrievals.OverQuota as over:
        quotas.limiter.refund(request.workspace, grant.granted, limits)
        raise refusal_error(over.reason, limits, grant) from None
    except SQLAlchemyError:  # nothing was recorded (a 503): give the token back
        quotas.limiter.refund(request.workspace, grant.granted, limits)
        raise
    unpublished = None
    if created:
        announce_created([row])
        if publish_later:
            unpublished = row.id
        else:
            publish_new(row.id, row.lane)
    else:
        quotas.limiter.refund(request.workspace, grant.granted, limits)
    read_admission.answered(request.workspace, request.mutation)
    read_admission.learn(row.id, row.workspace_id)
    if not created and not paid:
        subject = read_admission.mutation_subject(request.mutation)
        read_admission.admit(request.workspace, subject)
    return Submitted(retrieval_payload(row), created, row.lane, unpublished)


def publish_new(retrieval_id: uuid.UUID, lane: str) -> None:
    """Hand a new retrieval to the broker; one it did not take is left to the sweep."""
    if not outbox.publish([retrieval_id], lane):
        db.with_transient_retry(lambda s: publication.mark_unpublished(s, [retrieval_id]))


def refusal_error(reason: str, limits: quotas.Limits, grant: quotas.Grant) -> ApiError:
    """The 429 of a new retrieval its workspace's quotas refused (`reason`: open or rate)."""
    if reason == retrievals.OVER_RATE:
        return quotas.over_rate(limits, grant.retry_after or 1)
    return quotas.over_ceiling(limits)


def announce_created(rows: list[retrieval_view.RetrievalRow]) -> None:
    """Count and log new retrievals (metrics, poll advice)."""
    for row in rows:
        RETRIEVALS_CREATED.labels(row.kind).inc()
        backlog.created(row.lane)
    if len(rows) == 1:
        ids = {"retrieval_id": str(rows[0].id), "workspace_id": str(rows[0].workspace_id)}
        with structlog.contextvars.bound_contextvars(**ids):
            log.info("retrieval_created", kind=rows[0].kind, lane=rows[0].lane)
    elif rows:
        log.info("retrievals_created", count=len(rows), workspace_id=str(rows[0].workspace_id))


def read_retrieval(
    session: Session, principal: Principal, retrieval_id: uuid.UUID
) -> RetrievalPayload:
    """The retrieval as it stands; 404 when unknown or outside the key's workspaces."""
    return read_retrieval_advised(session, principal, retrieval_id)[0]


def read_retrieval_advised(
    session: Session, principal: Principal, retrieval_id: uuid.UUID
) -> tuple[RetrievalPayload, int | None]:
    """The retrieval as it stands, and the `Retry-After` its answer carries."""
    principal.require(None)
    row = retrieval_view.read_row(session, retrieval_id)
    if row is None or not principal.can_read(row.workspace_id):
        raise not_found("no such retrieval")
    payload = retrieval_payload(row)
    return payload, retry_after(payload, row.lane)


def read_retrievals(
    session: Session, principal: Principal, retrieval_ids: list[uuid.UUID]
) -> list[RetrievalDoc | None]:
    """The retrievals in the order asked; None for unknown ids and other workspaces' alike."""
    principal.require(None)
    rows = retrieval_view.read_rows(session, retrieval_ids)
    readable = {
        row.id: retrieval_payload(row)["retrieval"]
        for row in rows
        if principal.can_read(row.workspace_id)
    }
    return [readable.get(retrieval_id) for retrieval_id in retrieval_ids]


def cancel_retrieval(principal: Principal, retrieval_id: uuid.UUID) -> RetrievalPayload:
    """Cancel a pending or running retrieval; a settled one is returned unchanged."""
    principal.require(None)

    def _cancel(session: Session) -> RetrievalPayload:
        row = retrieval_view.get_retrieval(session, retrieval_id)
        if row is None or not principal.can_read(row.workspace_id):
            raise not_found("no such retrieval")
        cancelled = transitions.cancel(session, row, clock.now())
        if cancelled is None:  # already settled, perhaps since we read it: answer it as it is
            cancelled = retrieval_view.get_retrieval(session, retrieval_id)
        return retrieval_payload(cancelled)  # type: ignore[arg-type]

    payload = db.with_transient_retry(_cancel)
    notify.settled([retrieval_id])
    return payload


def read_evidence(
    session: Session, principal: Principal, evidence_id: uuid.UUID, revision: int | None
) -> dict[str, Any]:
    """One evidence revision (latest by default) with the list of revisions."""
    principal.require(None)
    read_admission.admit_read_side(principal)
    evidence, row = readable_revision(session, principal, evidence_id, revision)
    revisions = evidence_store.list_revisions(session, evidence_id)
    confirmed = sources.confirmations(session, evidence_id)
    return evidence_payload(evidence, row, revisions, confirmed)


def poll_delay(
    state: str, pending: int, rand: Callable[[], float] = random.random, running: int = 1
) -> int | None:
    """Seconds a poller should wait before asking about a retrieval again; None once settled.

    `pending`: the pending retrievals of its lane (for a pending one); `running`: its
    workspace's running retrievals (for a running one). A workspace's one running retrieval
    is asked about again after a second; one of 300 running at once (a batch on a busy
    worker, each running for many seconds) after 12 s, not every second: read once a second
    each, they had drawn a read per poll at hundreds a second (docs/measurements.md).
    Jittered by ±JITTER, so that polls answered in the same second do not all come back in the
    same second (docs/performance.md, "The API").
    """
    if state == S.RUNNING.value:
        count, most = running, MAX_RUNNING_RETRY_AFTER_SECONDS
    elif state == S.PENDING.value:
        count, most = pending, MAX_RETRY_AFTER_SECONDS
    else:
        return None
    spread = 1 - JITTER + 2 * JITTER * rand()
    seconds = math.ceil(count / POLLS_PER_SECOND * spread)
    return min(most, max(MIN_RETRY_AFTER_SECONDS, seconds))


class _Backlog:
    """Pending retrievals per lane and running ones per workspace, re-counted at most every
    BACKLOG_CACHE_SECONDS.

    Between counts it adds the retrievals created since the last one: a count taken while the
    backlog grows by a few hundred a second is otherwise too low for the next second, and the
    polls it advises all come back early (measured: at a step from 0 to 200 POST/s, the first
    second's retrievals were all told 1 s; their polls doubled the API's load in the next
    second and its p99 rose to 150-220 ms). A process sees only its own share of the new
    retrievals, so it scales what it saw by the number of API processes (`api_workers`).
    Per lane, because an interactive retrieval does not wait behind the batch lane: its
    advice must not grow with another workspace's batch; running ones per workspace, because
    an agent's one running retrieval must not be told to wait behind another's hundreds.
    """

    def __init__(self) -> None:
        self._pending: dict[str, int] = {}
        self._running: dict[str, int] = {}
        self._created_since: dict[str, int] = {}
        self._counted_at = -math.inf
        self._lock = threading.Lock()

    def _recount_when_stale(self) -> None:
        stale = time.monotonic() - self._counted_at >= BACKLOG_CACHE_SECONDS
        if stale and self._lock.acquire(blocking=False):
            try:
                created_before = dict(self._created_since)
                self._pending, self._running = _count_open()
                for name, n in created_before.items():
                    self._created_since[name] = self._created_since.get(name, 0) - n
            except SQLAlchemyError:
                pass  # keep the last count: advice must never fail the answer it rides on
            finally:
                self._counted_at = time.monotonic()
                self._lock.release()

    def pending(self, lane: str | None = None) -> int:
        """The last count plus what was created here since, for one lane or all of them."""
        self._recount_when_stale()
        scale = get_settings().api_workers
        lanes = [lane] if lane is not None else list({*self._pending, *self._created_since})
        return sum(
            self._pending.get(name, 0) + self._created_since.get(name, 0) * scale for name in lanes
        )

    def running(self, workspace_id: str) -> int:
        """The workspace's running retrievals at the last count; at least the one asked about."""
        self._recount_when_stale()
        return max(1, self._running.get(workspace_id, 0))

    def created(self, lane: str = LANE_INTERACTIVE, count: int = 1) -> None:
        """Note retrievals this process just created (pending until a worker claims them)."""
        # Not atomic across threads: a rare lost one only softens advice.
        self._created_since[lane] = self._created_since.get(lane, 0) + count

    def clear(self) -> None:
        self._counted_at = -math.inf
        self._created_since = {}


def _count_open() -> tuple[dict[str, int], dict[str, int]]:
    """Pending retrievals by lane and running ones by workspace, from one grouped count."""
    pending: dict[str, int] = {}
    running: dict[str, int] = {}
    with db.session_scope(readonly=True) as session:
        for workspace, lane, state, n in retrieval_view.open_by_workspace(session):
            if state == S.PENDING.value:
                pending[lane] = pending.get(lane, 0) + n
            elif state == S.RUNNING.value:
                running[workspace] = running.get(workspace, 0) + n
    return pending, running


backlog = _Backlog()


def retry_after(payload: RetrievalPayload, lane: str = LANE_INTERACTIVE) -> int | None:
    """The `Retry-After` for an answer carrying this retrieval payload; None once it settled.

    A pending retrieval's advice follows the backlog of its own lane; a running one's, how
    many of its workspace's run at once.
    """
    retrieval = payload["retrieval"]
    state = retrieval["state"]
    if state == S.PENDING.value:
        return poll_delay(state, backlog.pending(lane))
    if state == S.RUNNING.value:
        return poll_delay(state, 0, running=backlog.running(retrieval["workspace_id"]))
    return None


def warm_up() -> None:
    """Open at start what the first requests would otherwise open under load, best effort.

    A database or broker that is down now is the requests' business (503, or the sweep
    publishes later), not startup's. What a cold first request costs: docs/performance.md.
    """

    try:
        engine = db.get_engine()
        size = getattr(engine.pool, "size", lambda: 1)()
        connections = [engine.connect() for _ in range(min(size, WARM_CONNECTIONS))]
        for connection in connections:
            connection.close()  # back to the pool, open
        with db.read_session() as session:
            retrieval_view.read_row(session, uuid.uuid4())
            with contextlib.suppress(ApiError):  # compiles the key lookup; no such key: 401
                authenticate(session, "Bearer warm-up")
        backlog.pending()
        celery.finalize()
        with celery.pool.acquire(block=True, timeout=PUBLISH_CONNECT_TIMEOUT_SECONDS) as broker:
            broker.ensure_connection(max_retries=0, timeout=PUBLISH_CONNECT_TIMEOUT_SECONDS)
    except Exception as exc:  # noqa: BLE001  (best effort: never stops the API from starting)
        log.warning("warm_up_incomplete", error=type(exc).__name__)

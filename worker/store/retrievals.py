"""Retrieval persistence: idempotent create, fenced claim and settle, cancel.

Every state change is one guarded UPDATE whose WHERE clause states the transition it allows
(`worker.states`), so concurrent workers, duplicate deliveries, cancels and the sweep can race
freely: the database lets exactly one of them win.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.results import Result, cancelled_result, has_content
from worker.states import RetrievalState as S
from worker.states import sources_of
from worker.store import db, evidence
from worker.store.models import Retrieval
from worker.store.typed import rowcount

if TYPE_CHECKING:
    from worker.content.images import ImageRef

RETRIEVAL: sa.Table = Retrieval.__table__  # type: ignore[attr-defined]

# The worker's two statements per delivery, built once (bound parameters are prefixed `b_`:
# SQLAlchemy reserves the column names for the SET clause).
_CLAIM = (
    sa.update(RETRIEVAL)
    .where(
        RETRIEVAL.c.id == sa.bindparam("b_id"),
        RETRIEVAL.c.state == S.PENDING.value,
        RETRIEVAL.c.valid_until > sa.bindparam("b_now"),
    )
    .values(
        state=S.RUNNING.value,
        attempt=RETRIEVAL.c.attempt + 1,
        lease_until=sa.bindparam("b_lease_until"),
    )
    .returning(
        RETRIEVAL.c.attempt,
        RETRIEVAL.c.url,
        RETRIEVAL.c.kind,
        RETRIEVAL.c.language,
        RETRIEVAL.c.workspace_id,
    )
)
_SETTLE = (
    sa.update(RETRIEVAL)
    .where(
        RETRIEVAL.c.id == sa.bindparam("b_id"),
        RETRIEVAL.c.state == S.RUNNING.value,
        RETRIEVAL.c.attempt == sa.bindparam("b_attempt"),
        RETRIEVAL.c.valid_until > sa.bindparam("b_now"),
    )
    .values(
        state=S.COMPLETED.value,
        result=sa.bindparam("b_result", type_=RETRIEVAL.c.result.type),
        settled_at=sa.bindparam("b_now"),
        lease_until=None,
        evidence_id=sa.bindparam("b_evidence_id", type_=RETRIEVAL.c.evidence_id.type),
        evidence_revision=sa.bindparam("b_revision", type_=sa.Integer),
    )
)


class MutationConflict(Exception):
    """Raised when a known (workspace_id, mutation_id) arrives with a different payload."""


@dataclass(frozen=True)
class NewRetrieval:
    """What a client asked for."""

    workspace_id: uuid.UUID
    mutation_id: uuid.UUID
    url: str
    kind: str
    language: str | None

    @property
    def language_key(self) -> str:
        """Language tags compare case-insensitively ("EN" and "en" are one request)."""
        return (self.language or "").lower()


@dataclass(frozen=True)
class Claim:
    """A worker's hold on a retrieval; `attempt` fences the settle."""

    retrieval_id: uuid.UUID
    attempt: int
    url: str
    kind: str
    language: str | None
    workspace_id: uuid.UUID


def create_retrieval(
    session: Session, request: NewRetrieval, now: datetime, ttl: timedelta
) -> tuple[Retrieval, bool]:
    """Record `request` once; return the row and whether this call created it.

    The UNIQUE(workspace_id, mutation_id) constraint decides races: INSERT … ON CONFLICT DO
    NOTHING, then (only when it did nothing) read whichever row won and compare its payload.
    A new row is marked published at once, optimistically: the caller publishes right after
    the commit and clears the mark if that fails (`mark_unpublished`); a crash in between is
    caught by the sweep, which republishes pending rows whose publish is old.
    """
    stmt = (
        db.insert_for(db.dialect(session))(RETRIEVAL)
        .values(
            id=uuid.uuid4(),
            workspace_id=request.workspace_id,
            mutation_id=request.mutation_id,
            url=request.url,
            kind=request.kind,
            language=request.language_key,
            state=S.PENDING.value,
            attempt=0,
            published_at=now,
            created_at=now,
            valid_until=now + ttl,
        )
        .on_conflict_do_nothing(index_elements=["workspace_id", "mutation_id"])
        .returning(*RETRIEVAL.columns)
    )
    inserted = session.execute(stmt).one_or_none()
    if inserted is not None:
        return Retrieval(**inserted._mapping), True
    row = session.execute(
        sa.select(Retrieval).where(
            RETRIEVAL.c.workspace_id == request.workspace_id,
            RETRIEVAL.c.mutation_id == request.mutation_id,
        )
    ).scalar_one()
    if (row.url, row.kind, row.language) != (request.url, request.kind, request.language_key):
        raise MutationConflict(str(request.mutation_id))
    return row, False


def get_retrieval(session: Session, retrieval_id: uuid.UUID) -> Retrieval | None:
    return session.get(Retrieval, retrieval_id, populate_existing=True)


#: One retrieval by id as a plain row: its payload needs the columns only, and the ORM's
#: identity map and object construction cost more CPU than the query on this hot path.
_ROW_BY_ID = sa.select(*RETRIEVAL.columns).where(RETRIEVAL.c.id == sa.bindparam("retrieval_id"))


def read_row(session: Session, retrieval_id: uuid.UUID) -> sa.Row[Any] | None:
    """The retrieval's columns as a plain row (attributes named as the model's), or None."""
    return session.execute(_ROW_BY_ID, {"retrieval_id": retrieval_id}).one_or_none()


def mark_unpublished(session: Session, retrieval_id: uuid.UUID) -> None:
    """The broker did not take it: leave it to the sweep, which publishes NULLs first."""
    session.execute(
        sa.update(Retrieval)
        .where(RETRIEVAL.c.id == retrieval_id, RETRIEVAL.c.state == S.PENDING.value)
        .values(published_at=None)
    )


def mark_published(session: Session, ids: list[uuid.UUID], now: datetime) -> None:
    """Note that these retrievals were handed to the broker."""
    if ids:
        session.execute(
            sa.update(Retrieval)
            .where(RETRIEVAL.c.id.in_(ids), RETRIEVAL.c.state == S.PENDING.value)
            .values(published_at=now)
        )


def claim(
    session: Session, retrieval_id: uuid.UUID, now: datetime, lease: timedelta
) -> Claim | None:
    """Move pending → running and bump the attempt; None when someone else has it or it ended."""
    row = session.execute(
        _CLAIM, {"b_id": retrieval_id, "b_now": now, "b_lease_until": now + lease}
    ).one_or_none()
    if row is None:
        expire_due(session, now, retrieval_id)
        return None
    return Claim(
        retrieval_id, row.attempt, row.url, row.kind, row.language or None, row.workspace_id
    )


class Fenced(Exception):
    """The settle lost its claim (cancel, expiry, a newer attempt): its writes are rolled back."""


def settle(
    session: Session,
    claim: Claim,
    result: Result,
    now: datetime,
    images: Sequence[ImageRef] = (),
) -> None:
    """Record the outcome of `claim` in `session`'s transaction; raise `Fenced` if it lost.

    The evidence revision (if the result has content) is written first, then one UPDATE sets
    the outcome and the revision it names, matching only the attempt that claimed and only
    before `valid_until`. When that UPDATE matches nothing, `Fenced` makes the caller roll the
    whole transaction back, so a late zombie or a result past the receipt's lifetime leaves no
    trace. Lock order is always the evidence item, then the retrieval row.
    """
    evidence_id = revision = None
    if has_content(result):
        evidence_id, revision = evidence.record(
            session, claim.workspace_id, claim.kind, claim.url, result, now, images
        )
    won = session.execute(
        _SETTLE,
        {
            "b_id": claim.retrieval_id,
            "b_attempt": claim.attempt,
            "b_now": now,
            "b_result": result,
            "b_evidence_id": evidence_id,
            "b_revision": revision,
        },
    )
    if not rowcount(won):
        raise Fenced(str(claim.retrieval_id))


def settle_claim(
    claim: Claim, result: Result, now: datetime, images: Sequence[ImageRef] = ()
) -> bool:
    """Settle `claim` in its own transaction; False when it was fenced off.

    A fenced settle writes nothing; if the retrieval is past `valid_until` it is expired instead
    (too late is too late: past valid_until a retrieval is expired, not completed).
    """
    try:
        db.with_transient_retry(lambda s: settle(s, claim, result, now, images))
    except Fenced:
        db.with_transient_retry(lambda s: expire_due(s, now, claim.retrieval_id))
        return False
    return True


def cancel(session: Session, row: Retrieval, now: datetime) -> Retrieval | None:
    """Cancel `row` if it is still pending or running; the cancelled row, or None if settled."""
    cancelled = session.execute(
        sa.update(Retrieval)
        .where(
            RETRIEVAL.c.id == row.id,
            RETRIEVAL.c.state.in_([s.value for s in sources_of(S.CANCELLED)]),
        )
        .values(
            state=S.CANCELLED.value,
            result=cancelled_result(row.kind, now),  # type: ignore[arg-type]
            settled_at=now,
            lease_until=None,
        )
        .returning(*RETRIEVAL.columns)
    ).one_or_none()
    return None if cancelled is None else Retrieval(**cancelled._mapping)


def expire_due(session: Session, now: datetime, retrieval_id: uuid.UUID | None = None) -> int:
    """Expire open retrievals whose `valid_until` has passed; return how many."""
    stmt = sa.update(Retrieval).where(
        RETRIEVAL.c.state.in_([s.value for s in sources_of(S.EXPIRED)]),
        RETRIEVAL.c.valid_until <= now,
    )
    if retrieval_id is not None:
        stmt = stmt.where(RETRIEVAL.c.id == retrieval_id)
    result = session.execute(stmt.values(state=S.EXPIRED.value, settled_at=now, lease_until=None))
    return rowcount(result)


def rescue_lost(session: Session, now: datetime, max_attempts: int) -> tuple[int, int]:
    """Leases that ran out: back to pending while attempts remain, else unconfirmed.

    Returns (re-pended, unconfirmed). Re-pended rows get `published_at = NULL` so the same
    sweep publishes them again.
    """
    lost = (RETRIEVAL.c.state == S.RUNNING.value) & (RETRIEVAL.c.lease_until < now)
    retried = session.execute(
        sa.update(Retrieval)
        .where(lost, RETRIEVAL.c.attempt < max_attempts)
        .values(state=S.PENDING.value, lease_until=None, published_at=None)
    )
    gave_up = session.execute(
        sa.update(Retrieval)
        .where(lost, RETRIEVAL.c.attempt >= max_attempts)
        .values(state=S.UNCONFIRMED.value, settled_at=now, lease_until=None)
    )
    return rowcount(retried), rowcount(gave_up)


def due_for_publish(
    session: Session, now: datetime, republish_after: timedelta, limit: int
) -> list[uuid.UUID]:
    """Pending retrievals never published, or published long enough ago to be presumed lost."""
    stmt = (
        sa.select(RETRIEVAL.c.id)
        .where(
            RETRIEVAL.c.state == S.PENDING.value,
            sa.or_(
                RETRIEVAL.c.published_at.is_(None), RETRIEVAL.c.published_at < now - republish_after
            ),
        )
        .order_by(RETRIEVAL.c.published_at.is_not(None), RETRIEVAL.c.created_at)
        .limit(limit)
    )
    if db.dialect(session) == db.POSTGRESQL:
        stmt = stmt.with_for_update(skip_locked=True)
    return list(session.execute(stmt).scalars())


def oldest_open_age(session: Session, now: datetime) -> dict[str, float | None]:
    """Age in seconds of the oldest pending and running retrievals (for health and alerts)."""
    ages: dict[str, float | None] = {}
    for state in (S.PENDING, S.RUNNING):
        oldest = session.execute(
            sa.select(sa.func.min(RETRIEVAL.c.created_at)).where(RETRIEVAL.c.state == state.value)
        ).scalar_one_or_none()
        ages[state.value] = None if oldest is None else _age(now, oldest)
    return ages


def _age(now: datetime, then: datetime) -> float:
    from worker.clock import as_utc

    return max(0.0, (now - as_utc(then)).total_seconds())


def count_unpublished(session: Session, ids: list[uuid.UUID]) -> int:
    """How many of `ids` were never handed to the broker."""
    if not ids:
        return 0
    return int(
        session.execute(
            sa.select(sa.func.count()).where(
                RETRIEVAL.c.id.in_(ids), RETRIEVAL.c.published_at.is_(None)
            )
        ).scalar_one()
    )


def count_pending(session: Session) -> int:
    """How many retrievals wait for a worker (one indexed count)."""
    query = sa.select(sa.func.count()).where(RETRIEVAL.c.state == S.PENDING.value)
    return int(session.execute(query).scalar_one())


def count_by_outcome(session: Session) -> list[tuple[str, str, str | None, str | None, int]]:
    """(kind, state, result status, result reason, rows) for every combination present."""
    status_of = RETRIEVAL.c.result["status"].as_string()
    reason_of = RETRIEVAL.c.result["reason"].as_string()
    query = sa.select(RETRIEVAL.c.kind, RETRIEVAL.c.state, status_of, reason_of, sa.func.count())
    query = query.group_by(RETRIEVAL.c.kind, RETRIEVAL.c.state, status_of, reason_of)
    return [
        (kind, state, status, reason, int(count))
        for kind, state, status, reason, count in session.execute(query)
    ]

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
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from worker.content.results import cancelled_result, has_content
from worker.states import RetrievalState as S
from worker.states import sources_of
from worker.store import evidence
from worker.store.models import Retrieval
from worker.store.typed import rowcount

if TYPE_CHECKING:
    from worker.content.images import ImageRef

RETRIEVAL: sa.Table = Retrieval.__table__  # type: ignore[attr-defined]
T = RETRIEVAL.c

# The worker's two statements per delivery, built once (bound parameters are prefixed `b_`:
# SQLAlchemy reserves the column names for the SET clause).
_CLAIM = (
    sa.update(RETRIEVAL)
    .where(
        T.id == sa.bindparam("b_id"),
        T.state == S.PENDING.value,
        T.valid_until > sa.bindparam("b_now"),
    )
    .values(state=S.RUNNING.value, attempt=T.attempt + 1, lease_until=sa.bindparam("b_lease_until"))
    .returning(T.attempt, T.url, T.kind, T.language, T.workspace_id)
)
_SETTLE = (
    sa.update(RETRIEVAL)
    .where(
        T.id == sa.bindparam("b_id"),
        T.state == S.RUNNING.value,
        T.attempt == sa.bindparam("b_attempt"),
        T.valid_until > sa.bindparam("b_now"),
    )
    .values(
        state=S.COMPLETED.value,
        result=sa.bindparam("b_result", type_=T.result.type),
        settled_at=sa.bindparam("b_now"),
        lease_until=None,
        evidence_id=sa.bindparam("b_evidence_id", type_=T.evidence_id.type),
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


def _insert(session: Session) -> Any:
    return postgresql.insert if session.bind.dialect.name == "postgresql" else sqlite.insert  # type: ignore[union-attr]


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
        _insert(session)(RETRIEVAL)
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
        .returning(*Retrieval.__table__.columns)  # type: ignore[attr-defined]
    )
    inserted = session.execute(stmt).one_or_none()
    if inserted is not None:
        return Retrieval(**inserted._mapping), True
    row = session.execute(
        sa.select(Retrieval).where(
            T.workspace_id == request.workspace_id, T.mutation_id == request.mutation_id
        )
    ).scalar_one()
    if (row.url, row.kind, row.language) != (request.url, request.kind, request.language_key):
        raise MutationConflict(str(request.mutation_id))
    return row, False


def get_retrieval(session: Session, retrieval_id: uuid.UUID) -> Retrieval | None:
    return session.get(Retrieval, retrieval_id, populate_existing=True)


def mark_unpublished(session: Session, retrieval_id: uuid.UUID) -> None:
    """The broker did not take it: leave it to the sweep, which publishes NULLs first."""
    session.execute(
        sa.update(Retrieval)
        .where(T.id == retrieval_id, T.state == S.PENDING.value)
        .values(published_at=None)
    )


def mark_published(session: Session, ids: list[uuid.UUID], now: datetime) -> None:
    """Note that these retrievals were handed to the broker."""
    if ids:
        session.execute(
            sa.update(Retrieval)
            .where(T.id.in_(ids), T.state == S.PENDING.value)
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
    result: dict[str, Any],
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
    claim: Claim, result: dict[str, Any], now: datetime, images: Sequence[ImageRef] = ()
) -> bool:
    """Settle `claim` in its own transaction; False when it was fenced off.

    A fenced settle writes nothing; if the retrieval is past `valid_until` it is expired instead
    (too late is too late: past valid_until a retrieval is expired, not completed).
    """
    from worker.store import db

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
        .where(T.id == row.id, T.state.in_([s.value for s in sources_of(S.CANCELLED)]))
        .values(
            state=S.CANCELLED.value,
            result=cancelled_result(row.kind, now),  # type: ignore[arg-type]
            settled_at=now,
            lease_until=None,
        )
        .returning(*Retrieval.__table__.columns)  # type: ignore[attr-defined]
    ).one_or_none()
    return None if cancelled is None else Retrieval(**cancelled._mapping)


def expire_due(session: Session, now: datetime, retrieval_id: uuid.UUID | None = None) -> int:
    """Expire open retrievals whose `valid_until` has passed; return how many."""
    stmt = sa.update(Retrieval).where(
        T.state.in_([s.value for s in sources_of(S.EXPIRED)]), T.valid_until <= now
    )
    if retrieval_id is not None:
        stmt = stmt.where(T.id == retrieval_id)
    result = session.execute(stmt.values(state=S.EXPIRED.value, settled_at=now, lease_until=None))
    return rowcount(result)


def rescue_lost(session: Session, now: datetime, max_attempts: int) -> tuple[int, int]:
    """Leases that ran out: back to pending while attempts remain, else unconfirmed.

    Returns (re-pended, unconfirmed). Re-pended rows get `published_at = NULL` so the same
    sweep publishes them again.
    """
    lost = (T.state == S.RUNNING.value) & (T.lease_until < now)
    retried = session.execute(
        sa.update(Retrieval)
        .where(lost, T.attempt < max_attempts)
        .values(state=S.PENDING.value, lease_until=None, published_at=None)
    )
    gave_up = session.execute(
        sa.update(Retrieval)
        .where(lost, T.attempt >= max_attempts)
        .values(state=S.UNCONFIRMED.value, settled_at=now, lease_until=None)
    )
    return rowcount(retried), rowcount(gave_up)


def due_for_publish(
    session: Session, now: datetime, republish_after: timedelta, limit: int
) -> list[uuid.UUID]:
    """Pending retrievals never published, or published long enough ago to be presumed lost."""
    stmt = (
        sa.select(T.id)
        .where(
            T.state == S.PENDING.value,
            sa.or_(T.published_at.is_(None), T.published_at < now - republish_after),
        )
        .order_by(T.published_at.is_not(None), T.created_at)
        .limit(limit)
    )
    if session.bind.dialect.name == "postgresql":  # type: ignore[union-attr]
        stmt = stmt.with_for_update(skip_locked=True)
    return list(session.execute(stmt).scalars())


def oldest_open_age(session: Session, now: datetime) -> dict[str, float | None]:
    """Age in seconds of the oldest pending and running retrievals (for health and alerts)."""
    ages: dict[str, float | None] = {}
    for state in (S.PENDING, S.RUNNING):
        oldest = session.execute(
            sa.select(sa.func.min(T.created_at)).where(T.state == state.value)
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
            sa.select(sa.func.count()).where(T.id.in_(ids), T.published_at.is_(None))
        ).scalar_one()
    )

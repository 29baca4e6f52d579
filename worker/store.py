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

from worker import evidence_store
from worker.models import Retrieval
from worker.results import cancelled_result, has_content
from worker.states import RetrievalState as S
from worker.states import sources_of

if TYPE_CHECKING:
    from worker.images import ImageRef

T = Retrieval.__table__.c  # type: ignore[attr-defined]


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
        _insert(session)(Retrieval.__table__)
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
        sa.update(Retrieval)
        .where(T.id == retrieval_id, T.state == S.PENDING.value, T.valid_until > now)
        .values(state=S.RUNNING.value, attempt=T.attempt + 1, lease_until=now + lease)
        .returning(T.attempt, T.url, T.kind, T.language, T.workspace_id)
    ).one_or_none()
    if row is None:
        expire_due(session, now, retrieval_id)
        return None
    return Claim(
        retrieval_id, row.attempt, row.url, row.kind, row.language or None, row.workspace_id
    )


def settle(
    session: Session,
    claim: Claim,
    result: dict[str, Any],
    now: datetime,
    images: Sequence[ImageRef] = (),
) -> bool:
    """Record the outcome of `claim`; False when the claim was fenced off (cancel, expiry, re-run).

    The UPDATE only matches the attempt that claimed, and only before `valid_until`, so a late
    zombie or a result past the receipt's lifetime writes nothing; the
    evidence revision is recorded in the same transaction, after the retrieval row is won.
    """
    won = session.execute(
        sa.update(Retrieval)
        .where(
            T.id == claim.retrieval_id,
            T.state == S.RUNNING.value,
            T.attempt == claim.attempt,
            T.valid_until > now,
        )
        .values(state=S.COMPLETED.value, result=result, settled_at=now, lease_until=None)
        .returning(T.workspace_id, T.url)
    ).one_or_none()
    if won is None:
        # Too late is too late: past valid_until the retrieval is expired, not completed.
        expire_due(session, now, claim.retrieval_id)
        return False
    if has_content(result):
        evidence_id, revision = evidence_store.record(
            session, won.workspace_id, claim.kind, won.url, result, now, images
        )
        session.execute(
            sa.update(Retrieval)
            .where(T.id == claim.retrieval_id)
            .values(evidence_id=evidence_id, evidence_revision=revision)
        )
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
    return int(result.rowcount)


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
    ).rowcount
    gave_up = session.execute(
        sa.update(Retrieval)
        .where(lost, T.attempt >= max_attempts)
        .values(state=S.UNCONFIRMED.value, settled_at=now, lease_until=None)
    ).rowcount
    return int(retried), int(gave_up)


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

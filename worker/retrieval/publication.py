"""Which recorded retrievals the broker holds: the outbox's bookkeeping (`published_at`).

A retrieval is published after its row commits (`worker.jobs.outbox`); one the broker did not
take, or lost, is found here by the sweep and published again.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.domain.states import RetrievalState as S
from worker.store.models import (
    Retrieval,
)
from worker.store.retrieval_view import RETRIEVAL

if TYPE_CHECKING:
    pass


def mark_unpublished(session: Session, ids: Sequence[uuid.UUID]) -> None:
    """The broker did not take them: leave them to the sweep, which publishes NULLs first."""
    if ids:
        session.execute(
            sa.update(Retrieval)
            .where(RETRIEVAL.c.id.in_(list(ids)), RETRIEVAL.c.state == S.PENDING.value)
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


def due_for_publish(
    session: Session, now: datetime, republish_after: timedelta, limit: int
) -> list[tuple[uuid.UUID, str]]:
    """Pending retrievals never published, or published long enough ago to be presumed lost.

    (id, lane) pairs: the sweep publishes each to its own lane's queue.
    """
    stmt = (
        sa.select(RETRIEVAL.c.id, RETRIEVAL.c.lane)
        .where(
            RETRIEVAL.c.state == S.PENDING.value,
            sa.or_(
                RETRIEVAL.c.published_at.is_(None), RETRIEVAL.c.published_at < now - republish_after
            ),
        )
        .order_by(RETRIEVAL.c.published_at.is_not(None), RETRIEVAL.c.created_at)
        .limit(limit)
    )
    if session.bind.dialect.name == "postgresql":  # type: ignore[union-attr]
        stmt = stmt.with_for_update(skip_locked=True)
    return [(row.id, row.lane) for row in session.execute(stmt)]


def unpublished_among(session: Session, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Which of `ids` were never handed to the broker."""
    if not ids:
        return set()
    query = sa.select(RETRIEVAL.c.id).where(
        RETRIEVAL.c.id.in_(ids), RETRIEVAL.c.published_at.is_(None)
    )
    return set(session.execute(query).scalars())

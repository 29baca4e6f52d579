"""Watch rows and their plain queries (the scheduler's claim is `scheduler`'s)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.store.models import Watch
from worker.store.typed import rowcount
from worker.watches import schedule

WATCH: sa.Table = Watch.__table__  # type: ignore[attr-defined]


def insert_watch(
    session: Session,
    workspace_id: uuid.UUID,
    url: str,
    kind: str,
    language: str,
    interval_seconds: int,
    enabled: bool,
    now: datetime,
) -> sa.Row[Any]:
    watch_id = uuid.uuid4()
    values = {
        "id": watch_id,
        "workspace_id": workspace_id,
        "url": url,
        "kind": kind,
        "language": language,
        "interval_seconds": interval_seconds,
        "enabled": enabled,
        "next_run_at": schedule.first_slot(watch_id, interval_seconds, now),
        "missed_runs": 0,
        "failing": False,
        "created_at": now,
        "updated_at": now,
    }
    return session.execute(sa.insert(WATCH).values(values).returning(*WATCH.columns)).one()


def count_watches(session: Session, workspace_id: uuid.UUID) -> int:
    query = sa.select(sa.func.count()).where(WATCH.c.workspace_id == workspace_id)
    return int(session.execute(query).scalar_one())


def get_watch(session: Session, watch_id: uuid.UUID) -> sa.Row[Any] | None:
    return session.execute(sa.select(WATCH).where(WATCH.c.id == watch_id)).one_or_none()


def list_watches(
    session: Session, workspaces: Sequence[uuid.UUID] | None, limit: int
) -> Sequence[sa.Row[Any]]:
    """The watches of `workspaces` (None: of all), oldest first."""
    query = sa.select(WATCH).order_by(WATCH.c.created_at, WATCH.c.id).limit(limit)
    if workspaces is not None:
        query = query.where(WATCH.c.workspace_id.in_(workspaces))
    return session.execute(query).all()


def update_watch(
    session: Session, watch_id: uuid.UUID, changes: dict[str, Any], now: datetime
) -> sa.Row[Any] | None:
    """Apply `changes`; a new interval, or enabling, moves the next run to the new grid."""
    row = session.execute(
        sa.select(WATCH).where(WATCH.c.id == watch_id).with_for_update()
    ).one_or_none()
    if row is None:
        return None
    values = dict(changes)
    interval = values.get("interval_seconds", row.interval_seconds)
    regrid = "interval_seconds" in values and interval != row.interval_seconds
    if regrid or (values.get("enabled") is True and not row.enabled):
        values["next_run_at"] = schedule.first_slot(watch_id, interval, now)
    values["updated_at"] = now
    query = sa.update(WATCH).where(WATCH.c.id == watch_id).values(values)
    return session.execute(query.returning(*WATCH.columns)).one_or_none()


def delete_watch(session: Session, watch_id: uuid.UUID) -> bool:
    return rowcount(session.execute(sa.delete(WATCH).where(WATCH.c.id == watch_id))) > 0

"""Webhook events that are not a retrieval as GET answers it: the watch events.

`evidence.changed`, `watch.failing` and `watch.recovered` are recorded as deliveries of the same
outbox as `retrieval.settled` (same signing, retries, delivery log), keyed by the watch run's
retrieval (one delivery per endpoint, run and event type), with their `data` stored on the row:
it describes a moment (two revisions, a failure) that later reads could no longer rebuild.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.platform.settings import get_settings
from worker.store import db
from worker.webhooks.records import DELIVERY, ENDPOINT, PENDING, _stage

EVIDENCE_CHANGED = "evidence.changed"
WATCH_FAILING = "watch.failing"
WATCH_RECOVERED = "watch.recovered"
WATCH_EVENTS = (EVIDENCE_CHANGED, WATCH_FAILING, WATCH_RECOVERED)


def record_event(
    session: Session,
    workspace_id: uuid.UUID,
    retrieval_id: uuid.UUID,
    event_type: str,
    data: dict[str, Any],
    now: datetime,
) -> list[uuid.UUID]:
    """Stage `event_type` with `data` for each enabled endpoint of the workspace subscribed to
    it, in `session`'s transaction (published after the commit); the new deliveries' ids."""
    targets = session.execute(
        sa.select(ENDPOINT.c.id).where(
            ENDPOINT.c.workspace_id == workspace_id,
            ENDPOINT.c.enabled.is_(True),
            ENDPOINT.c.events.like(f"% {event_type} %"),
        )
    ).scalars()
    window = timedelta(seconds=get_settings().webhook_retry_window_seconds)
    body = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    rows = [
        {
            "id": uuid.uuid4(),
            "endpoint_id": endpoint_id,
            "workspace_id": workspace_id,
            "retrieval_id": retrieval_id,
            "event_type": event_type,
            "state": PENDING,
            "attempts": 0,
            "next_attempt_at": now,
            "retry_until": now + window,
            "published_at": None,
            "created_at": now,
            "payload": body,
        }
        for endpoint_id in targets
    ]
    if not rows:
        return []
    stmt = (
        db.insert_for(db.dialect(session))(DELIVERY)
        .on_conflict_do_nothing(index_elements=["endpoint_id", "retrieval_id", "event_type"])
        .returning(DELIVERY.c.id)
    )
    ids = list(session.execute(stmt, rows).scalars())
    if ids:
        _stage(session, {row["endpoint_id"] for row in rows})
    return ids


def stored_event(session: Session, delivery_id: uuid.UUID) -> tuple[str, datetime] | None:
    """A watch event's stored `data` (JSON) and when it was recorded; None for other events."""
    row = session.execute(
        sa.select(DELIVERY.c.payload, DELIVERY.c.created_at).where(DELIVERY.c.id == delivery_id)
    ).one_or_none()
    if row is None or row.payload is None:
        return None
    return row.payload, row.created_at

"""Webhook endpoints of a workspace: registered, listed, changed, their secrets rotated.

Each endpoint subscribes to event types (stored as one comma-separated text). Its deliveries
are `worker.webhooks.records`'.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.store.models import WebhookDelivery, WebhookEndpoint
from worker.store.typed import rowcount

ENDPOINT: sa.Table = WebhookEndpoint.__table__  # type: ignore[attr-defined]
DELIVERY: sa.Table = WebhookDelivery.__table__  # type: ignore[attr-defined]


def encode_events(events: Sequence[str]) -> str:
    """Event types as stored: sorted, space-separated, padded so `LIKE '% type %'` matches."""
    return " " + " ".join(sorted(set(events))) + " "


def decode_events(stored: str) -> list[str]:
    return stored.split()


# Endpoints.
def insert_endpoint(
    session: Session,
    workspace_id: uuid.UUID,
    url: str,
    events: Sequence[str],
    description: str | None,
    secret: str,
    now: datetime,
) -> sa.Row[Any]:
    values = {
        "id": uuid.uuid4(),
        "workspace_id": workspace_id,
        "url": url,
        "events": encode_events(events),
        "description": description,
        "enabled": True,
        "secret": secret,
        "created_at": now,
        "updated_at": now,
    }
    return session.execute(sa.insert(ENDPOINT).values(values).returning(*ENDPOINT.columns)).one()


def count_endpoints(session: Session, workspace_id: uuid.UUID) -> int:
    query = sa.select(sa.func.count()).where(ENDPOINT.c.workspace_id == workspace_id)
    return int(session.execute(query).scalar_one())


def get_endpoint(session: Session, endpoint_id: uuid.UUID) -> sa.Row[Any] | None:
    return session.execute(sa.select(ENDPOINT).where(ENDPOINT.c.id == endpoint_id)).one_or_none()


def list_endpoints(
    session: Session, workspace_ids: Sequence[uuid.UUID] | None
) -> list[sa.Row[Any]]:
    """The endpoints of these workspaces (None: of every workspace), oldest first."""
    query = sa.select(ENDPOINT).order_by(ENDPOINT.c.created_at, ENDPOINT.c.id)
    if workspace_ids is not None:
        query = query.where(ENDPOINT.c.workspace_id.in_(list(workspace_ids)))
    return list(session.execute(query))


def update_endpoint(
    session: Session, endpoint_id: uuid.UUID, changes: dict[str, Any], now: datetime
) -> sa.Row[Any] | None:
    """Apply `changes` (column: value; `events` as a list); enabling clears the failure record."""
    values = dict(changes)
    if "events" in values:
        values["events"] = encode_events(values["events"])
    if values.get("enabled") is not None:
        values["disabled_reason"] = None
        values["failing_since"] = None
    values["updated_at"] = now
    stmt = sa.update(ENDPOINT).where(ENDPOINT.c.id == endpoint_id).values(values)
    return session.execute(stmt.returning(*ENDPOINT.columns)).one_or_none()


def rotate_secret(
    session: Session, endpoint_id: uuid.UUID, secret: str, grace: timedelta, now: datetime
) -> sa.Row[Any] | None:
    """Sign with `secret` from now on, and with the current one too until `now + grace`."""
    stmt = (
        sa.update(ENDPOINT)
        .where(ENDPOINT.c.id == endpoint_id)
        .values(
            previous_secret=ENDPOINT.c.secret,
            previous_secret_until=now + grace,
            secret=secret,
            updated_at=now,
        )
    )
    return session.execute(stmt.returning(*ENDPOINT.columns)).one_or_none()


def delete_endpoint(session: Session, endpoint_id: uuid.UUID) -> bool:
    session.execute(sa.delete(DELIVERY).where(DELIVERY.c.endpoint_id == endpoint_id))
    return bool(rowcount(session.execute(sa.delete(ENDPOINT).where(ENDPOINT.c.id == endpoint_id))))

"""What the webhook routes and `evidence webhooks` do, as plain functions over a principal.

An endpoint belongs to one workspace: the key needs the research scope and that workspace, and
an endpoint (or delivery) of a workspace the key cannot read is a 404, never a 403, so its
existence does not leak. The signing secret is answered only by create and rotate.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from api.auth import Principal
from api.errors import ApiError, invalid_input, not_found
from api.webhook_schemas import WebhookCreateRequest, WebhookUpdateRequest
from worker.domain import clock
from worker.domain.clock import isoformat
from worker.platform.settings import get_settings
from worker.store import db
from worker.store.db import read_only_session
from worker.webhooks import endpoints, signing
from worker.webhooks import records as store

#: Deliveries one list answers at most.
MAX_DELIVERIES = 100


def webhook_doc(row: sa.Row[Any]) -> dict[str, Any]:
    """An endpoint as the routes answer it (never its secrets)."""
    now = clock.now()
    until = row.previous_secret_until
    grace = until is not None and row.previous_secret and clock.as_utc(until) > now
    return {
        "id": str(row.id),
        "workspace_id": str(row.workspace_id),
        "url": row.url,
        "events": endpoints.decode_events(row.events),
        "description": row.description,
        "enabled": row.enabled,
        "disabled_reason": row.disabled_reason,
        "previous_secret_expires_at": isoformat(clock.as_utc(until)) if grace else None,
        "created_at": isoformat(clock.as_utc(row.created_at)),
        "updated_at": isoformat(clock.as_utc(row.updated_at)),
    }


def _instant(value: Any) -> str | None:
    return None if value is None else isoformat(clock.as_utc(value))


def delivery_doc(row: sa.Row[Any]) -> dict[str, Any]:
    """A delivery: its state, attempts, last error and, while pending, its next attempt."""
    return {
        "id": str(row.id),
        "webhook_id": str(row.endpoint_id),
        "retrieval_id": str(row.retrieval_id),
        "event_type": row.event_type,
        "state": row.state,
        "attempts": row.attempts,
        "last_status": row.last_status,
        "last_error": row.last_error,
        "next_attempt_at": _instant(row.next_attempt_at) if row.state == store.PENDING else None,
        "retry_until": _instant(row.retry_until),
        "created_at": _instant(row.created_at),
        "last_attempt_at": _instant(row.last_attempt_at),
        "delivered_at": _instant(row.delivered_at),
    }


def _readable(principal: Principal, row: sa.Row[Any] | None) -> sa.Row[Any]:
    """The endpoint if the key may see it; else 404 (as if it did not exist)."""
    if row is None or not principal.can_read(row.workspace_id):
        raise not_found("no such webhook")
    return row


def _endpoint(principal: Principal, webhook_id: uuid.UUID) -> sa.Row[Any]:
    principal.require(None)
    with read_only_session() as session:
        return _readable(principal, endpoints.get_endpoint(session, webhook_id))


def create_webhook(principal: Principal, body: WebhookCreateRequest) -> dict[str, Any]:
    """Register an endpoint; the answer carries its signing secret, shown only now."""
    workspace_id = uuid.UUID(body.workspace_id)
    principal.require(workspace_id)
    limit = get_settings().webhook_max_endpoints
    secret = signing.new_secret()

    def insert(session: Any) -> sa.Row[Any]:
        if endpoints.count_endpoints(session, workspace_id) >= limit:
            raise ApiError(
                409,
                "invalid_input",
                f"this workspace already has {limit} webhooks (the most allowed)",
                "workspace_id",
            )
        return endpoints.insert_endpoint(
            session, workspace_id, body.url, body.events, body.description, secret, clock.now()
        )

    row = db.with_transient_retry(insert)
    return {"webhook": webhook_doc(row), "secret": secret}


def list_webhooks(principal: Principal, workspace_id: uuid.UUID | None) -> dict[str, Any]:
    """The endpoints of one workspace, or of every workspace the key may use."""
    principal.require(workspace_id)
    workspaces = [workspace_id] if workspace_id else sorted(principal.workspaces)
    with read_only_session() as session:
        rows = endpoints.list_endpoints(session, workspaces)
    return {"webhooks": [webhook_doc(row) for row in rows]}


def get_webhook(principal: Principal, webhook_id: uuid.UUID) -> dict[str, Any]:
    return {"webhook": webhook_doc(_endpoint(principal, webhook_id))}


#: Fields that may be omitted but never sent as null.
_NOT_NULL = ("url", "events", "enabled")


def update_webhook(
    principal: Principal, webhook_id: uuid.UUID, body: WebhookUpdateRequest
) -> dict[str, Any]:
    """Change the URL, events, description or enabled flag; enabling clears a disable reason."""
    given = body.model_fields_set
    for name in _NOT_NULL:
        if name in given and getattr(body, name) is None:
            raise invalid_input(f"{name} may be omitted but not null", name)
    if not given:
        raise invalid_input("nothing to change: give url, events, description or enabled")
    _endpoint(principal, webhook_id)
    changes = {name: getattr(body, name) for name in given}
    row = db.with_transient_retry(
        lambda s: endpoints.update_endpoint(s, webhook_id, changes, clock.now())
    )
    return {"webhook": webhook_doc(_readable(principal, row))}


def rotate_secret(principal: Principal, webhook_id: uuid.UUID) -> dict[str, Any]:
    """A new signing secret (shown only now); the old one keeps signing for the grace period."""
    _endpoint(principal, webhook_id)
    secret = signing.new_secret()
    grace = timedelta(seconds=get_settings().webhook_secret_grace_seconds)
    row = db.with_transient_retry(
        lambda s: endpoints.rotate_secret(s, webhook_id, secret, grace, clock.now())
    )
    return {"webhook": webhook_doc(_readable(principal, row)), "secret": secret}


def delete_webhook(principal: Principal, webhook_id: uuid.UUID) -> None:
    """Delete the endpoint and its deliveries (pending ones are never sent)."""
    _endpoint(principal, webhook_id)
    db.with_transient_retry(lambda s: endpoints.delete_endpoint(s, webhook_id))


def list_deliveries(
    principal: Principal, webhook_id: uuid.UUID, limit: int, state: str | None
) -> dict[str, Any]:
    """The endpoint's deliveries, newest first."""
    _endpoint(principal, webhook_id)
    with read_only_session() as session:
        rows = store.list_deliveries(session, webhook_id, limit, state)
    return {"deliveries": [delivery_doc(row) for row in rows]}


def redeliver(
    principal: Principal, webhook_id: uuid.UUID, delivery_id: uuid.UUID
) -> dict[str, Any]:
    """Send a delivery again now (same id, same payload, a fresh retry window)."""
    _endpoint(principal, webhook_id)
    with read_only_session() as session:
        found = store.get_delivery(session, delivery_id)
    if found is None or found.endpoint_id != webhook_id:
        raise not_found("no such delivery")
    window = timedelta(seconds=get_settings().webhook_retry_window_seconds)
    row = db.with_transient_retry(lambda s: store.redeliver(s, delivery_id, clock.now(), window))
    if row is None:
        raise invalid_input("an attempt of this delivery is in flight; retry later", status=409)
    return {"delivery": delivery_doc(row)}

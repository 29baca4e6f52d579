"""Webhook deliveries: an outbox fenced like retrievals (endpoints: `worker.webhooks.endpoints`).

A delivery row is written in the transaction that settles its retrieval (`record_settled`, called
by every settle path of `worker.retrieval.transitions`). After that commit its endpoint is handed
to the publisher the Celery layer installs (`install_publisher`), which publishes what the
endpoint has room for (`worker.webhooks.dispatch`); a delivered attempt does the same for its
endpoint, so a healthy endpoint's deliveries follow each other at once. A worker claims one
attempt with a guarded UPDATE that bumps `attempts` (the fencing token) and takes a lease; the
attempt's outcome is written only if `attempts` is still the one it claimed. The sweep publishes
what is due, has room and never reached a worker.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session

from worker.domain.clock import as_utc
from worker.domain.safe_text import storable
from worker.platform.settings import get_settings
from worker.store import db
from worker.store.models import Retrieval, WebhookDelivery, WebhookEndpoint
from worker.store.row_locks import unheld
from worker.store.typed import rowcount
from worker.webhooks import endpoints

ENDPOINT: sa.Table = WebhookEndpoint.__table__  # type: ignore[attr-defined]
DELIVERY: sa.Table = WebhookDelivery.__table__  # type: ignore[attr-defined]
RETRIEVAL: sa.Table = Retrieval.__table__  # type: ignore[attr-defined]

#: The one event type so far: a retrieval reached a settled state (any of them).
RETRIEVAL_SETTLED = "retrieval.settled"
EVENT_TYPES = (RETRIEVAL_SETTLED,)
PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
DELIVERY_STATES = (PENDING, DELIVERED, FAILED)
#: Longest error text kept on a delivery.
MAX_ERROR_CHARS = 500
#: Session.info key of the endpoints a transaction gave work (new, redelivered or a delivered
#: attempt's room), whose due deliveries are published after its commit.
_STAGED = "webhook_endpoints"


# Recording (inside the settle's transaction).
#: The subscribed, enabled endpoints of the given retrievals' workspaces (built once: it runs in
#: every settle, and building it cost more CPU than running it).
_SETTLED_TARGETS = (
    sa.select(ENDPOINT.c.id, RETRIEVAL.c.id, RETRIEVAL.c.workspace_id)
    .join(RETRIEVAL, RETRIEVAL.c.workspace_id == ENDPOINT.c.workspace_id)
    .where(
        RETRIEVAL.c.id.in_(sa.bindparam("b_ids", expanding=True)),
        ENDPOINT.c.enabled.is_(True),
        ENDPOINT.c.events.like(f"% {RETRIEVAL_SETTLED} %"),
    )
)


def record_settled(
    session: Session,
    retrieval_ids: Sequence[uuid.UUID],
    now: datetime,
    window: timedelta | None = None,
) -> list[uuid.UUID]:
    """Stage a `retrieval.settled` delivery per enabled subscribed endpoint of each retrieval's
    workspace, in `session`'s transaction; they are published once it commits. One indexed read
    when the workspace has no endpoint (the common case)."""
    if not retrieval_ids:
        return []
    if window is None:
        window = timedelta(seconds=get_settings().webhook_retry_window_seconds)
    targets = session.execute(_SETTLED_TARGETS, {"b_ids": list(retrieval_ids)}).all()
    if not targets:
        return []
    rows = [
        {
            "id": uuid.uuid4(),
            "endpoint_id": endpoint_id,
            "workspace_id": workspace_id,
            "retrieval_id": retrieval_id,
            "event_type": RETRIEVAL_SETTLED,
            "state": PENDING,
            "attempts": 0,
            "next_attempt_at": now,
            "retry_until": now + window,
            # Published after the commit if its endpoint has room, else when it has.
            "published_at": None,
            "created_at": now,
        }
        for endpoint_id, retrieval_id, workspace_id in targets
    ]
    stmt = (
        db.insert_for(db.dialect(session))(DELIVERY)
        .on_conflict_do_nothing(index_elements=["endpoint_id", "retrieval_id", "event_type"])
        .returning(DELIVERY.c.id)
    )
    ids = list(session.execute(stmt, rows).scalars())
    if ids:
        _stage(session, {endpoint_id for endpoint_id, _, _ in targets})
    return ids


def _stage(session: Session, endpoint_ids: set[uuid.UUID]) -> None:
    """Publish these endpoints' due deliveries after `session` commits (never if it rolls
    back)."""
    staged = session.info.get(_STAGED)
    if staged is None:
        staged = session.info[_STAGED] = set()
        event.listen(session, "after_commit", _after_commit)
        event.listen(session, "after_rollback", _after_rollback)
    staged.update(endpoint_ids)


#: What publishes endpoints' due deliveries after a commit: installed by the Celery layer
#: (`worker.jobs.webhook_outbox`), which the records never import.
_publisher: Callable[[list[uuid.UUID]], None] | None = None


def install_publisher(publish: Callable[[list[uuid.UUID]], None]) -> None:
    """After each commit that gave endpoints work, publish with `publish(endpoint_ids)`."""
    global _publisher
    _publisher = publish


def _after_commit(session: Session) -> None:
    endpoint_ids = session.info.pop(_STAGED, None)
    if endpoint_ids and _publisher is not None:  # without one, the webhook sweep publishes
        _publisher(sorted(endpoint_ids))


def _after_rollback(session: Session) -> None:
    session.info.pop(_STAGED, None)


# Attempts.
@dataclass(frozen=True)
class Attempt:
    """A claimed attempt: the delivery, its fencing token, and what to send where."""

    delivery_id: uuid.UUID
    attempt: int
    endpoint_id: uuid.UUID
    retrieval_id: uuid.UUID
    event_type: str
    retry_until: datetime
    url: str
    secret: str
    previous_secret: str | None
    previous_secret_until: datetime | None


_BUSY = DELIVERY.alias("busy")


def claim(
    session: Session, delivery_id: uuid.UUID, now: datetime, lease: timedelta, concurrency: int
) -> Attempt | None:
    """Claim the next attempt of a due delivery whose endpoint is enabled and has room.

    None when it is not due, already settled, leased by another worker, or its endpoint is
    disabled or already has `concurrency` attempts in flight (the count is read in the same
    statement; concurrent claims may overshoot it by the number of racing workers).
    """
    in_flight = (
        sa.select(sa.func.count())
        .select_from(_BUSY)
        .where(
            _BUSY.c.endpoint_id == DELIVERY.c.endpoint_id,
            _BUSY.c.state == PENDING,
            _BUSY.c.lease_until >= now,
        )
        .scalar_subquery()
    )
    enabled = sa.select(ENDPOINT.c.id).where(ENDPOINT.c.enabled.is_(True))
    stmt = (
        sa.update(DELIVERY)
        .where(
            DELIVERY.c.id == delivery_id,
            DELIVERY.c.state == PENDING,
            DELIVERY.c.next_attempt_at <= now,
            sa.or_(DELIVERY.c.lease_until.is_(None), DELIVERY.c.lease_until < now),
            DELIVERY.c.endpoint_id.in_(enabled),
            in_flight < concurrency,
        )
        .values(attempts=DELIVERY.c.attempts + 1, lease_until=now + lease, last_attempt_at=now)
        .returning(
            DELIVERY.c.attempts,
            DELIVERY.c.endpoint_id,
            DELIVERY.c.retrieval_id,
            DELIVERY.c.event_type,
            DELIVERY.c.retry_until,
        )
    )
    row = session.execute(stmt).one_or_none()
    if row is None:
        return None
    endpoint = endpoints.get_endpoint(session, row.endpoint_id)
    assert endpoint is not None  # deleting an endpoint deletes its deliveries first
    return Attempt(
        delivery_id=delivery_id,
        attempt=row.attempts,
        endpoint_id=row.endpoint_id,
        retrieval_id=row.retrieval_id,
        event_type=row.event_type,
        retry_until=as_utc(row.retry_until),
        url=endpoint.url,
        secret=endpoint.secret,
        previous_secret=endpoint.previous_secret,
        previous_secret_until=(
            None
            if endpoint.previous_secret_until is None
            else as_utc(endpoint.previous_secret_until)
        ),
    )


def defer(session: Session, delivery_id: uuid.UUID, now: datetime) -> None:
    """A claim refused (its endpoint busy, or not due): no message carries it any more
    (published_at NULL); it is published again once it is due and its endpoint has room."""
    session.execute(
        sa.update(DELIVERY)
        .where(
            DELIVERY.c.id == delivery_id,
            DELIVERY.c.state == PENDING,
            sa.or_(DELIVERY.c.lease_until.is_(None), DELIVERY.c.lease_until < now),
        )
        .values(published_at=None)
    )


def delivered(session: Session, attempt: Attempt, status: int, now: datetime) -> bool:
    """Record a 2xx for `attempt`; False when fenced off (a newer attempt owns the row)."""
    won = session.execute(
        _fenced(attempt).values(
            state=DELIVERED,
            delivered_at=now,
            lease_until=None,
            last_status=status,
            last_error=None,
        )
    )
    if not rowcount(won):
        return False
    session.execute(
        sa.update(ENDPOINT)
        .where(ENDPOINT.c.id == attempt.endpoint_id, ENDPOINT.c.failing_since.is_not(None))
        .values(failing_since=None)
    )
    # Its slot is free: the endpoint's next due delivery goes at once. A failed attempt frees
    # its slot for the sweep only, so a failing endpoint is tried at the sweep's pace.
    _stage(session, {attempt.endpoint_id})
    return True


@dataclass(frozen=True)
class FailureOutcome:
    """What a failed attempt came to."""

    recorded: bool
    final: bool = False
    disabled: bool = False


def failed_attempt(
    session: Session,
    attempt: Attempt,
    status: int | None,
    error: str,
    now: datetime,
    retry_in: timedelta,
    disable_after: timedelta,
) -> FailureOutcome:
    """Record a failed attempt: retry after `retry_in`, or mark it failed past its window.

    The endpoint's `failing_since` starts at the first failure after a success; past
    `disable_after` the endpoint is disabled with the reason.
    """
    final = now + retry_in > attempt.retry_until
    error = storable(error[:MAX_ERROR_CHARS])  # it may quote the receiver's answer
    values: dict[str, Any] = {"lease_until": None, "last_status": status, "last_error": error}
    if final:
        values["state"] = FAILED
    else:
        values.update(next_attempt_at=now + retry_in, published_at=None)
    if not rowcount(session.execute(_fenced(attempt).values(values))):
        return FailureOutcome(recorded=False)
    session.execute(
        sa.update(ENDPOINT)
        .where(ENDPOINT.c.id == attempt.endpoint_id, ENDPOINT.c.failing_since.is_(None))
        .values(failing_since=now)
    )
    reason = (
        f"disabled after failing for more than {int(disable_after.total_seconds())} s; "
        f"last error: {error}"
    )
    disabled = session.execute(
        sa.update(ENDPOINT)
        .where(
            ENDPOINT.c.id == attempt.endpoint_id,
            ENDPOINT.c.enabled.is_(True),
            ENDPOINT.c.failing_since <= now - disable_after,
        )
        .values(enabled=False, disabled_reason=reason[:MAX_ERROR_CHARS], updated_at=now)
    )
    return FailureOutcome(recorded=True, final=final, disabled=bool(rowcount(disabled)))


def _fenced(attempt: Attempt) -> Any:
    return sa.update(DELIVERY).where(
        DELIVERY.c.id == attempt.delivery_id,
        DELIVERY.c.state == PENDING,
        DELIVERY.c.attempts == attempt.attempt,
    )


# The sweep.
def fail_expired(session: Session, now: datetime) -> int:
    """Pending deliveries past their window that no attempt holds (a disabled endpoint's),
    and no transaction holds (`row_locks.unheld`: the sweeper never waits on one row)."""
    expired = (
        (DELIVERY.c.state == PENDING)
        & (DELIVERY.c.retry_until < now)
        & sa.or_(DELIVERY.c.lease_until.is_(None), DELIVERY.c.lease_until < now)
    )
    return rowcount(
        session.execute(
            sa.update(DELIVERY)
            .where(unheld(DELIVERY.c.id, expired))
            .values(
                state=FAILED,
                lease_until=None,
                last_error=sa.func.coalesce(DELIVERY.c.last_error, "retry window passed"),
            )
        )
    )


def mark_unpublished(session: Session, ids: Sequence[uuid.UUID]) -> None:
    """The broker did not take them: no message carries them (the sweep publishes them)."""
    if ids:
        session.execute(
            sa.update(DELIVERY)
            .where(DELIVERY.c.id.in_(list(ids)), DELIVERY.c.state == PENDING)
            .values(published_at=None)
        )


# Reading and redelivery.
def get_delivery(session: Session, delivery_id: uuid.UUID) -> sa.Row[Any] | None:
    return session.execute(sa.select(DELIVERY).where(DELIVERY.c.id == delivery_id)).one_or_none()


def list_deliveries(
    session: Session, endpoint_id: uuid.UUID, limit: int, state: str | None = None
) -> list[sa.Row[Any]]:
    """The endpoint's deliveries, newest first."""
    query = sa.select(DELIVERY).where(DELIVERY.c.endpoint_id == endpoint_id)
    if state is not None:
        query = query.where(DELIVERY.c.state == state)
    query = query.order_by(DELIVERY.c.created_at.desc(), DELIVERY.c.id).limit(limit)
    return list(session.execute(query))


def redeliver(
    session: Session, delivery_id: uuid.UUID, now: datetime, window: timedelta
) -> sa.Row[Any] | None:
    """Send a delivery again (same id and payload): due now, with a fresh retry window.

    A delivery that an attempt holds right now is left as it is (None): its outcome comes first.
    """
    stmt = (
        sa.update(DELIVERY)
        .where(
            DELIVERY.c.id == delivery_id,
            sa.or_(DELIVERY.c.lease_until.is_(None), DELIVERY.c.lease_until < now),
        )
        .values(
            state=PENDING,
            next_attempt_at=now,
            retry_until=now + window,
            lease_until=None,
            published_at=None,
        )
        .returning(*DELIVERY.columns)
    )
    row = session.execute(stmt).one_or_none()
    if row is not None:
        _stage(session, {row.endpoint_id})
    return row


def count_by_state(session: Session) -> dict[str, int]:
    query = sa.select(DELIVERY.c.state, sa.func.count()).group_by(DELIVERY.c.state)
    return {state: int(n) for state, n in session.execute(query).all()}

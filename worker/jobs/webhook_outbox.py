"""Webhook deliveries handed to the broker: after their rows commit, and again by the sweep.

A settle stages its deliveries' ids on its session (`worker.webhooks.records`); this module
installs itself as the publisher that runs after such a commit, so the webhook records never
import Celery. A process that settles without it installed (none of the service's do: the API
and the workers import it) leaves its deliveries to the sweep, which publishes every due delivery
the broker does not hold.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog
from kombu.serialization import dumps

from worker.domain import clock
from worker.jobs import outbox
from worker.jobs.celery_app import (
    DELIVER_WEBHOOK_TASK,
    PUBLISH_CONNECT_TIMEOUT_SECONDS,
    WEBHOOK_QUEUE,
    app,
)
from worker.platform.settings import get_settings
from worker.store import db
from worker.webhooks import records as store

log = structlog.get_logger(__name__)

#: Most deliveries one sweep publishes; the next sweep takes the rest.
PUBLISH_BATCH = 500


def _message(channel: Any, delivery_id: uuid.UUID) -> str:
    """A deliver message for `delivery_id`, named for it in logs and Flower (`shadow`)."""
    task_id = str(uuid.uuid4())
    headers, properties, body, _ = app.amqp.as_task_v2(
        task_id, DELIVER_WEBHOOK_TASK, args=[str(delivery_id)], shadow=f"webhook {delivery_id}"
    )
    content_type, content_encoding, data = dumps(body, serializer="json")
    message = channel.prepare_message(data, 0, content_type, content_encoding, headers, properties)
    channel._inplace_augment_message(message, "", WEBHOOK_QUEUE)
    return json.dumps(message)


def publish(delivery_ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """One message per delivery on the webhooks queue; the ids that reached the broker."""
    if not delivery_ids:
        return []
    try:
        with app.pool.acquire(block=True, timeout=PUBLISH_CONNECT_TIMEOUT_SECONDS) as connection:
            connection.ensure_connection(max_retries=0, timeout=PUBLISH_CONNECT_TIMEOUT_SECONDS)
            channel = connection.default_channel
            outbox._push(channel, WEBHOOK_QUEUE, [_message(channel, i) for i in delivery_ids])
    except outbox.PUBLISH_ERRORS as exc:
        log.warning("webhook_publish_failed", error=type(exc).__name__, count=len(delivery_ids))
        return []
    return list(delivery_ids)


def publish_committed(delivery_ids: list[uuid.UUID]) -> None:
    """Publish deliveries whose rows just committed; never raises (it runs inside a commit):
    what the broker did not take is left to the sweep."""
    try:
        sent = set(publish(delivery_ids))
        unsent = [i for i in delivery_ids if i not in sent]
        if unsent:
            db.with_transient_retry(lambda s: store.mark_unpublished(s, unsent))
    except Exception:  # rows stay published_at=now: the sweep republishes them after R s
        log.exception("webhook_publish_after_commit_failed", count=len(delivery_ids))


store.install_publisher(publish_committed)


@dataclass(frozen=True)
class WebhookSweepReport:
    """What one webhook sweep did."""

    failed: int
    published: int


def run_webhook_sweep(now: datetime | None = None) -> WebhookSweepReport:
    """Fail deliveries past their window, publish the due ones the broker does not hold."""
    settings = get_settings()
    now = now or clock.now()
    failed = db.with_transient_retry(lambda s: store.fail_expired(s, now))
    republish_after = timedelta(seconds=settings.republish_after_seconds)
    published = 0
    with db.session_scope() as session:
        due, never = store.due_for_publish(session, now, republish_after, PUBLISH_BATCH)
        queued = outbox.queue_length(WEBHOOK_QUEUE) if due else 0
        if due and queued is not None:
            stale = [i for i in due if i not in never]
            chosen = [i for i in due if i in never] + stale[: max(0, len(stale) - queued)]
            sent = publish(chosen)
            store.mark_published(session, sent, clock.now())
            published = len(sent)
    report = WebhookSweepReport(failed, published)
    if failed or published:
        log.info("webhook_sweep", **report.__dict__)
    return report

"""Webhook delivery: the outbox's publisher, the deliver task, and the webhook sweep.

A settle writes its delivery rows in its own transaction (`worker.webhooks.records`); once it
commits they are published here, one message per delivery on the `webhooks` queue. The deliver
task claims one attempt (fenced, leased, at most `EVIDENCE_WEBHOOK_ENDPOINT_CONCURRENCY` in
flight per endpoint), signs and sends it through the egress guard, and records the outcome;
a failure is retried by the sweep once its back-off has passed (no Celery countdown: an ETA
message lives in a worker's memory and dies with it). A broker outage, a killed worker or a
receiver outage leaves rows the sweep republishes; a retry keeps the delivery's id.
"""

from __future__ import annotations

import json
import os
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
from worker.platform import confine
from worker.platform.settings import get_settings
from worker.retrieval import records as retrievals
from worker.retrieval.payload import retrieval_payload
from worker.store import db
from worker.webhooks import metrics, policy, signing
from worker.webhooks import records as store
from worker.webhooks.sender import Sender, SendResult

log = structlog.get_logger(__name__)

#: Most deliveries one sweep publishes; the next sweep takes the rest.
PUBLISH_BATCH = 500

_sender: tuple[int, Sender] | None = None


def get_sender() -> Sender:
    """This process's sender (a forked child makes its own)."""
    global _sender
    if _sender is None or _sender[0] != os.getpid():
        _sender = (os.getpid(), Sender(get_settings()))
    return _sender[1]


# Publishing.
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


# Delivering.
def payload(event_type: str, row: Any) -> str:
    """The body: the event type and time, and the retrieval exactly as GET answers it."""
    document = retrieval_payload(row)
    at = document["retrieval"]["settled_at"] or document["retrieval"]["created_at"]
    return json.dumps(
        {"type": event_type, "timestamp": at, "data": document},
        separators=(",", ":"),
        ensure_ascii=False,
    )


def active_secrets(attempt: store.Attempt, now: datetime) -> list[str]:
    """The current secret, and the previous one while its grace period lasts."""
    out = [attempt.secret]
    until = attempt.previous_secret_until
    if attempt.previous_secret and until is not None and clock.as_utc(until) > now:
        out.append(attempt.previous_secret)
    return out


def run_delivery(delivery_id: uuid.UUID) -> dict[str, Any]:
    """Process one deliver message: claim an attempt, send it, record how it went."""
    settings = get_settings()
    now = clock.now()
    lease = timedelta(seconds=settings.webhook_lease_seconds)
    attempt = db.with_transient_retry(
        lambda s: store.claim(s, delivery_id, now, lease, settings.webhook_endpoint_concurrency)
    )
    if attempt is None:
        # Not due, settled, held elsewhere, or its endpoint is busy or disabled: if it is still
        # to send, the sweep publishes it again (never two messages waiting on one lease).
        db.with_transient_retry(lambda s: store.defer(s, delivery_id, now))
        log.info("webhook_claim_skipped", delivery_id=str(delivery_id))
        return {"delivery_id": str(delivery_id), "outcome": "skipped"}
    structlog.contextvars.bind_contextvars(
        delivery_id=str(delivery_id), endpoint_id=str(attempt.endpoint_id)
    )
    try:
        result = _send(attempt)
    except Exception as exc:
        if confine.group_wide(exc):
            raise
        # Whatever this delivery raises, it would raise on every attempt: recorded as a failed
        # attempt, it backs off and ends with its window like any other.
        confine.record("webhook", "failed", exc, delivery_id=str(delivery_id))
        result = SendResult(False, None, "the delivery could not be prepared", 0.0, "error")
    metrics.record_attempt(result.outcome, result.seconds)
    return record(attempt, result)


def _send(attempt: store.Attempt) -> SendResult:
    row = db.with_transient_retry(lambda s: retrievals.read_row(s, attempt.retrieval_id))
    if row is None:
        return SendResult(False, None, "the retrieval no longer exists", 0.0, "error")
    body = payload(attempt.event_type, row)
    sent_at = clock.now()
    delivery = str(attempt.delivery_id)
    headers = signing.headers(active_secrets(attempt, sent_at), delivery, sent_at, body)
    return get_sender().send(attempt.url, body.encode(), headers)


def record(attempt: store.Attempt, result: SendResult) -> dict[str, Any]:
    """Write an attempt's outcome (fenced by its attempt number) and log it."""
    settings = get_settings()
    now = clock.now()
    outcome = {"delivery_id": str(attempt.delivery_id), "attempt": attempt.attempt}
    fields = {"attempt": attempt.attempt, "status": result.status, "seconds": result.seconds}
    if result.ok:
        status = result.status or 200
        won = db.with_transient_retry(lambda s: store.delivered(s, attempt, status, now))
        log.info("webhook_delivered" if won else "webhook_outcome_fenced", **fields)
        return {**outcome, "outcome": "delivered" if won else "fenced"}
    delay = policy.retry_delay(
        attempt.attempt, settings.webhook_retry_base_seconds, settings.webhook_retry_cap_seconds
    )
    disable_after = timedelta(seconds=settings.webhook_disable_after)
    error = result.error or "failed"

    def failed(status: int | None, text: str) -> store.FailureOutcome:
        return db.with_transient_retry(
            lambda s: store.failed_attempt(s, attempt, status, text, now, delay, disable_after)
        )

    try:
        failure = failed(result.status, error)
    except Exception as exc:
        if confine.group_wide(exc):
            raise
        # The error's text (a receiver's answer) is what the database refused: recorded
        # without it, the attempt still backs off and counts toward disabling the endpoint.
        confine.record("webhook", "failed", exc, delivery_id=str(attempt.delivery_id))
        error = f"the attempt's error could not be recorded ({type(exc).__name__})"
        failure = failed(None, error)
    if not failure.recorded:
        log.info("webhook_outcome_fenced", **fields)
        return {**outcome, "outcome": "fenced"}
    event = "webhook_failed" if failure.final else "webhook_attempt_failed"
    log.warning(event, error=error, retry_in=delay.total_seconds(), **fields)
    if failure.disabled:
        log.warning("webhook_endpoint_disabled", endpoint_id=str(attempt.endpoint_id))
    return {**outcome, "outcome": "failed" if failure.final else "retrying", "error": error}


# The sweep.
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

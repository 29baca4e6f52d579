"""Webhook delivery: one attempt of a delivery, claimed, signed, sent and recorded.

A settle writes its delivery rows in its own transaction (`worker.webhooks.records`); once it
commits, those its endpoint has room for are published (`worker.jobs.webhook_outbox`,
`worker.webhooks.dispatch`), one message per delivery on the `webhooks` queue. The deliver task
claims one attempt (fenced, leased, at most `EVIDENCE_WEBHOOK_ENDPOINT_CONCURRENCY` in flight per
endpoint), signs and sends it through the egress guard, and records the outcome; a success
publishes the endpoint's next due delivery, a failure is retried by the sweep once its back-off
has passed (no Celery countdown: an ETA message lives in a worker's memory and dies with it). A
broker outage, a killed worker or a receiver outage leaves rows the sweep republishes; a retry
keeps the delivery's id.
"""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timedelta
from typing import Any

import structlog

from worker.domain import clock
from worker.platform import confine
from worker.platform.settings import get_settings
from worker.store import db, retrieval_view
from worker.store.retrieval_view import retrieval_payload
from worker.webhooks import events, metrics, policy, signing
from worker.webhooks import records as store
from worker.webhooks.sender import Sender, SendResult

log = structlog.get_logger(__name__)

_sender: tuple[int, Sender] | None = None


def get_sender() -> Sender:
    """This process's sender (a forked child makes its own)."""
    global _sender
    if _sender is None or _sender[0] != os.getpid():
        _sender = (os.getpid(), Sender(get_settings()))
    return _sender[1]


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
        # Not due, settled, held elsewhere, or its endpoint is busy or disabled (rare: only what
        # can be attempted is published): if it is still to send, it is published again once
        # due with room (never two messages waiting on one lease).
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


def _body(attempt: store.Attempt) -> str | None:
    """The attempt's body: a watch event's stored data, or the retrieval as GET answers it."""
    if attempt.event_type in events.WATCH_EVENTS:
        stored = db.with_transient_retry(lambda s: events.stored_event(s, attempt.delivery_id))
        if stored is None:
            return None
        data, at = stored
        stamp = clock.isoformat(clock.as_utc(at))
        return f'{{"type":{json.dumps(attempt.event_type)},"timestamp":"{stamp}","data":{data}}}'
    row = db.with_transient_retry(lambda s: retrieval_view.read_row(s, attempt.retrieval_id))
    return None if row is None else payload(attempt.event_type, row)


def _send(attempt: store.Attempt) -> SendResult:
    body = _body(attempt)
    if body is None:
        return SendResult(False, None, "the retrieval no longer exists", 0.0, "error")
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

"""Webhook deliveries handed to the broker: after a commit gave their endpoint work, and by
the sweep.

A settle, a redelivery or a delivered attempt stages its endpoint on its session
(`worker.webhooks.records`); this module installs itself as the publisher that runs after such a
commit, so the webhook records never import Celery. It publishes only what can be attempted now
(`worker.webhooks.dispatch`: due, its endpoint with room, within the fleet's and the workspace's
share of `EVIDENCE_WEBHOOK_MAX_IN_FLIGHT`), so a backlog that waits costs no message. A process
that settles without it installed (none of the service's do: the API and the workers import it)
leaves its deliveries to the sweep, which publishes the same way for every endpoint.
"""

from __future__ import annotations

import json
import os
import threading
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
from worker.webhooks import dispatch
from worker.webhooks import records as store

log = structlog.get_logger(__name__)

#: Most deliveries one publish hands over (`EVIDENCE_WEBHOOK_MAX_IN_FLIGHT` bounds it first).
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


def _limits() -> dispatch.Limits:
    settings = get_settings()
    return dispatch.Limits(settings.webhook_endpoint_concurrency, settings.webhook_max_in_flight)


def _publish_picked(ids: list[uuid.UUID]) -> int:
    """Publish deliveries `dispatch.pick` marked (committed); unmark what the broker refused."""
    sent = set(publish(ids))
    unsent = [i for i in ids if i not in sent]
    if unsent:
        db.with_transient_retry(lambda s: store.mark_unpublished(s, unsent))
    return len(sent)


def publish_for(endpoint_ids: list[uuid.UUID]) -> int:
    """Publish what these endpoints may attempt now; how many messages went."""
    republish_after = timedelta(seconds=get_settings().republish_after_seconds)
    now = clock.now()
    ids = db.with_transient_retry(
        lambda s: dispatch.pick(
            s, now, republish_after, _limits(), PUBLISH_BATCH, endpoint_ids=endpoint_ids
        )
    )
    return _publish_picked(ids)


class _Rounds:
    """The process's publisher thread: endpoints staged by commits are published in rounds.

    A commit only adds its endpoints to a set and wakes the thread (a settle never waits for a
    publish); each round publishes every endpoint staged since the last one with one `pick`, so
    a burst of settles or of delivered attempts costs a few picks, not one each. Endpoints still
    staged when the process dies are the sweep's: their deliveries carry no message.
    """

    def __init__(self) -> None:
        self._reset()
        # A forked child has no publisher thread, and may have copied the lock held.
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._staged: set[uuid.UUID] = set()
        self._wake = threading.Event()
        self._owner = 0  # the pid whose thread runs the rounds

    def add(self, endpoint_ids: list[uuid.UUID]) -> None:
        with self._lock:
            self._staged.update(endpoint_ids)
            if self._owner != os.getpid():
                self._owner = os.getpid()
                threading.Thread(target=self._run, name="webhook-publisher", daemon=True).start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                endpoint_ids, self._staged = sorted(self._staged), set()
            if not endpoint_ids:
                continue
            try:
                publish_for(endpoint_ids)
            except Exception:  # marked rows are republished by the sweep after R s
                log.exception("webhook_publish_after_commit_failed", endpoints=len(endpoint_ids))


_rounds = _Rounds()


def publish_committed(endpoint_ids: list[uuid.UUID]) -> None:
    """After a commit gave these endpoints work: hand them to this process's publisher thread
    (it runs inside a commit: it never raises, and never waits for the database)."""
    _rounds.add(endpoint_ids)


store.install_publisher(publish_committed)


@dataclass(frozen=True)
class WebhookSweepReport:
    """What one webhook sweep did."""

    failed: int
    published: int


def run_webhook_sweep(now: datetime | None = None) -> WebhookSweepReport:
    """Fail deliveries past their window; publish the due ones that can be attempted now
    (their endpoint has room, within the fleet's and each workspace's share) and that no
    message carries."""
    settings = get_settings()
    now = now or clock.now()
    failed = db.with_transient_retry(lambda s: store.fail_expired(s, now))
    republish_after = timedelta(seconds=settings.republish_after_seconds)
    published = 0
    # Messages still queued may carry deliveries published long ago: as many are left alone.
    queued = outbox.queue_length(WEBHOOK_QUEUE)
    if queued is not None:  # None: the broker cannot be asked; nothing would reach it
        ids = db.with_transient_retry(
            lambda s: dispatch.pick(s, now, republish_after, _limits(), PUBLISH_BATCH, None, queued)
        )
        published = _publish_picked(ids)
    report = WebhookSweepReport(failed, published)
    if failed or published:
        log.info("webhook_sweep", **report.__dict__)
    return report

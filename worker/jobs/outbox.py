"""The outbox: hand recorded retrievals to the broker, after their rows are committed.

A publish that fails leaves `published_at` NULL; the sweep publishes it later. The message is
the retrieval id alone: everything else is read from the database, where the truth lives.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import structlog
from kombu.exceptions import OperationalError

from worker.jobs.celery_app import (
    PUBLISH_CONNECT_TIMEOUT_SECONDS,
    RETRIEVE_QUEUE,
    RETRIEVE_TASK,
    app,
)

log = structlog.get_logger(__name__)

#: Broker errors that mean "not published now; the sweep will try again".
PUBLISH_ERRORS: tuple[type[BaseException], ...] = (
    OperationalError,
    ConnectionError,
    OSError,
    TimeoutError,
)


def publish(retrieval_ids: Iterable[uuid.UUID]) -> list[uuid.UUID]:
    """Send one task message per id; return the ids that reached the broker."""
    sent: list[uuid.UUID] = []
    # Declare the queue with every batch: after a Redis restart its bindings are gone, and a
    # message routed through an unbound exchange would be dropped.
    declare = [app.amqp.queues[RETRIEVE_QUEUE]]
    try:
        with app.pool.acquire(block=True, timeout=PUBLISH_CONNECT_TIMEOUT_SECONDS) as connection:
            # One bounded connection attempt: kombu's default is to retry for seconds, and a
            # POST must not wait on a broker that is down (the sweep publishes later).
            connection.ensure_connection(max_retries=0, timeout=PUBLISH_CONNECT_TIMEOUT_SECONDS)
            for retrieval_id in retrieval_ids:
                app.send_task(
                    RETRIEVE_TASK,
                    args=[str(retrieval_id)],
                    queue=RETRIEVE_QUEUE,
                    connection=connection,
                    retry=False,
                    declare=declare,
                )
                sent.append(retrieval_id)
    except PUBLISH_ERRORS as exc:
        log.warning("publish_failed", error=type(exc).__name__, published=len(sent))
    return sent


def queue_length(queue: str = RETRIEVE_QUEUE) -> int | None:
    """Messages waiting in `queue` (0 when it does not exist), or None when the broker is down."""
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
            try:
                declared = connection.default_channel.queue_declare(queue=queue, passive=True)
            except connection.channel_errors:
                return 0
            return int(declared.message_count)
    except Exception:  # noqa: BLE001  (any broker failure means "cannot be asked now")
        return None


def broker_reachable() -> bool:
    """Whether a broker connection can be opened now."""
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
        return True
    except Exception:  # noqa: BLE001
        return False

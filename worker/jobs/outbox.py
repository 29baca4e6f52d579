"""The outbox: hand recorded retrievals to the broker, after their rows are committed.

A publish that fails leaves `published_at` NULL; the sweep publishes it later. Each lane has its
queue (`celery_app.LANE_QUEUES`): an interactive message is the retrieval id alone (everything
else is read from the database, where the truth lives); a batch message carries nothing, it
asks a worker to run the next batch retrieval the fair claim picks
(`worker.retrieval.claims.claim_next_batch`). One message per retrieval either way, so the
batch lane's messages count its work.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
import weakref
from collections.abc import Iterable, Sequence
from typing import Any

import redis
import structlog
from kombu.exceptions import OperationalError
from kombu.serialization import dumps

from worker.jobs.celery_app import (
    LANE_QUEUES,
    PUBLISH_CONNECT_TIMEOUT_SECONDS,
    RETRIEVE_NEXT_TASK,
    RETRIEVE_TASK,
    app,
)

log = structlog.get_logger(__name__)

#: Broker errors that mean "not published now; the sweep will try again".
PUBLISH_ERRORS: tuple[type[BaseException], ...] = (
    OperationalError,
    redis.RedisError,
    ConnectionError,
    OSError,
    TimeoutError,
)
#: Messages sent per Redis command (one round trip each).
PIPELINE_SIZE = 1000


def _message(channel: Any, queue: str, task: str, args: list[str]) -> str:
    """One Celery task message as kombu's Redis transport stores it in the queue's list.

    Built the way `Producer.publish` builds it (Celery's protocol 2, kombu's envelope), but
    addressed to the queue itself through the default exchange: no binding lookup per message,
    and a message restored after a lost worker goes back to the same queue. Sending them
    in one LPUSH costs one round trip per `PIPELINE_SIZE` messages instead of one or
    two each (measured on a loaded 2-core machine: 1 000 `send_task` calls 2.6-4.5 s, these
    messages in one LPUSH 0.3 s, batch-lane copies of one message 0.05 s).
    """
    task_id = str(uuid.uuid4())
    headers, properties, body, _ = app.amqp.as_task_v2(task_id, task, args=args)
    content_type, content_encoding, data = dumps(body, serializer="json")
    message = channel.prepare_message(data, 0, content_type, content_encoding, headers, properties)
    channel._inplace_augment_message(message, "", queue)  # body encoding, delivery tag
    return json.dumps(message)


def publish(retrieval_ids: Iterable[uuid.UUID], lane: str = "interactive") -> list[uuid.UUID]:
    """Send one message per id to `lane`'s queue; return the ids that reached the broker."""
    ids = list(retrieval_ids)
    if not ids:
        return []
    queue = LANE_QUEUES[lane]
    sent: list[uuid.UUID] = []
    try:
        with app.pool.acquire(block=True, timeout=PUBLISH_CONNECT_TIMEOUT_SECONDS) as connection:
            # One bounded connection attempt: kombu's default is to retry for seconds, and a
            # POST must not wait on a broker that is down (the sweep publishes later).
            connection.ensure_connection(max_retries=0, timeout=PUBLISH_CONNECT_TIMEOUT_SECONDS)
            channel = connection.default_channel
            for start in range(0, len(ids), PIPELINE_SIZE):
                chunk = ids[start : start + PIPELINE_SIZE]
                if lane == "batch":
                    messages = _tokens(channel, queue, len(chunk))
                else:
                    messages = _retrieve_messages(channel, queue, chunk)
                _push(channel, queue, messages)
                sent.extend(chunk)
    except PUBLISH_ERRORS as exc:
        log.warning("publish_failed", error=type(exc).__name__, published=len(sent), lane=lane)
    return sent


#: The message each process copies, by (process, queue, task).
_templates: dict[tuple[int, str, str], dict[str, Any]] = {}
#: The argument a retrieval message's template is built with, replaced in each copy by the
#: retrieval's id (a UUID too, and found nowhere else in the message).
_PLACEHOLDER = "00000000-0000-4000-8000-000000000000"


def _template(channel: Any, queue: str, task: str) -> dict[str, Any]:
    """The message each copy starts from; built once per process, queue and task with Celery,
    and never changed (threads publish at once: each copy has headers and properties of its
    own)."""
    key = (os.getpid(), queue, task)
    template = _templates.get(key)
    if template is None:
        args = [_PLACEHOLDER] if task == RETRIEVE_TASK else []
        template = json.loads(_message(channel, queue, task, args))
        _templates[key] = template
    return template


def _copy(template: dict[str, Any], retrieval_id: str | None = None) -> str:
    """A copy of `template` with fresh task ids, carrying `retrieval_id` if given.

    Building each message with Celery cost 0.16-0.38 ms, most of a 1 000-item batch's publish
    and much of a single POST's; a copy costs a tenth. Copies differ only in their task id,
    delivery tag and, for a retrieval, its id in the (base64) body and in `argsrepr`.
    """
    task_id = str(uuid.uuid4())
    headers = {**template["headers"], "id": task_id, "root_id": task_id}
    message = {
        **template,
        "headers": headers,
        "properties": {
            **template["properties"],
            "correlation_id": task_id,
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    if retrieval_id is not None:
        body = base64.b64decode(template["body"]).decode().replace(_PLACEHOLDER, retrieval_id)
        message["body"] = base64.b64encode(body.encode()).decode()
        headers["argsrepr"] = headers["argsrepr"].replace(_PLACEHOLDER, retrieval_id)
    return json.dumps(message)


def _tokens(channel: Any, queue: str, count: int) -> list[str]:
    """`count` batch-lane messages: they carry nothing (a worker claims what comes next)."""
    template = _template(channel, queue, RETRIEVE_NEXT_TASK)
    return [_copy(template) for _ in range(count)]


def _retrieve_messages(channel: Any, queue: str, ids: Sequence[uuid.UUID]) -> list[str]:
    """One interactive-lane message per retrieval id."""
    template = _template(channel, queue, RETRIEVE_TASK)
    return [_copy(template, str(retrieval_id)) for retrieval_id in ids]


#: A Redis client per kombu channel: building one per publish cost about 0.5 ms of CPU.
_clients: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _push(channel: Any, queue: str, messages: Sequence[str]) -> None:
    # One LPUSH with every message (kombu's `_put` pushes one a call): the list then reads as if
    # they were pushed one by one, and workers BRPOP the other end, oldest first.
    client = _clients.get(channel)
    if client is None:
        client = _clients[channel] = channel._create_client()
    client.lpush(channel._q_for_pri(queue, 0), *messages)


def queue_length(queue: str = LANE_QUEUES["interactive"]) -> int | None:
    """Messages waiting in `queue` (0 when it does not exist), or None when the broker is down."""
    lengths = queue_lengths([queue])
    return None if lengths is None else lengths[queue]


def queue_lengths(queues: Sequence[str]) -> dict[str, int] | None:
    """Messages waiting in each of `queues`, or None when the broker is down."""
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=2)
            out = {}
            for queue in queues:
                try:
                    declared = connection.default_channel.queue_declare(queue=queue, passive=True)
                except connection.channel_errors:
                    out[queue] = 0
                    continue
                out[queue] = int(declared.message_count)
            return out
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

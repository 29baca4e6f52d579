"""Outbox messages (`outbox._tokens`, `outbox._retrieve_messages`): copies of one Celery-built
message, each with ids of its own, also when threads publish at once."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from worker.jobs import outbox
from worker.jobs.celery_app import BATCH_QUEUE, LANE_QUEUES, RETRIEVE_NEXT_TASK, RETRIEVE_TASK, app

pytestmark = pytest.mark.usefixtures("services")


@pytest.fixture
def channel() -> Iterator[Any]:
    with app.pool.acquire(block=True, timeout=10) as connection:
        yield connection.default_channel


def _ids(message: dict[str, Any]) -> tuple[str, str, str, str]:
    headers, properties = message["headers"], message["properties"]
    return (
        headers["id"],
        headers["root_id"],
        properties["correlation_id"],
        properties["delivery_tag"],
    )


def test_tokens_are_the_task_message_with_ids_of_their_own(channel: Any) -> None:
    built = json.loads(outbox._message(channel, BATCH_QUEUE, RETRIEVE_NEXT_TASK, []))
    tokens = [json.loads(m) for m in outbox._tokens(channel, BATCH_QUEUE, 3)]
    tokens += [json.loads(m) for m in outbox._tokens(channel, BATCH_QUEUE, 2)]  # the template
    for token in tokens:
        task_id, root_id, correlation_id, _ = _ids(token)
        assert task_id == root_id == correlation_id
        assert token["headers"]["task"] == RETRIEVE_NEXT_TASK
        assert json.loads(base64.b64decode(token["body"])) == json.loads(
            base64.b64decode(built["body"])
        )  # no arguments
        # All else as Celery builds it: only the ids differ.
        for part in ("headers", "properties"):
            same = {k: v for k, v in token[part].items() if k not in ("id", "root_id")}
            fresh = {k: v for k, v in built[part].items() if k not in ("id", "root_id")}
            for k in ("correlation_id", "delivery_tag"):
                same.pop(k, None), fresh.pop(k, None)
            assert same == fresh, part
    assert len({_ids(t)[0] for t in tokens}) == len({_ids(t)[3] for t in tokens}) == 5


def _without_ids(message: dict[str, Any]) -> dict[str, Any]:
    """The message with its body decoded and its fresh ids left out."""
    headers = {k: v for k, v in message["headers"].items() if k not in ("id", "root_id")}
    properties = {
        k: v
        for k, v in message["properties"].items()
        if k not in ("correlation_id", "delivery_tag")
    }
    body = json.loads(base64.b64decode(message["body"]))
    return {**message, "headers": headers, "properties": properties, "body": body}


def test_retrieval_messages_are_celerys_own_for_each_id(channel: Any) -> None:
    """Each copy is what Celery builds for that retrieval id, ids aside (a worker reads the
    id from the body; Flower shows `argsrepr`)."""
    queue = LANE_QUEUES["interactive"]
    ids = [uuid.uuid4() for _ in range(3)]
    copies = [json.loads(m) for m in outbox._retrieve_messages(channel, queue, ids)]
    copies += [json.loads(m) for m in outbox._retrieve_messages(channel, queue, ids[:1])]
    for retrieval_id, copy in zip([*ids, ids[0]], copies, strict=True):
        built = json.loads(outbox._message(channel, queue, RETRIEVE_TASK, [str(retrieval_id)]))
        assert _without_ids(copy) == _without_ids(built)
        assert _without_ids(copy)["body"][0] == [str(retrieval_id)]
        assert copy["headers"]["argsrepr"] == repr([str(retrieval_id)])
        task_id, root_id, correlation_id, _ = _ids(copy)
        assert task_id == root_id == correlation_id != built["headers"]["id"]
    assert len({_ids(c)[0] for c in copies}) == len({_ids(c)[3] for c in copies}) == 4


def test_threads_publishing_at_once_never_share_or_mix_ids(channel: Any) -> None:
    def make(_: int) -> list[str]:
        return outbox._tokens(channel, BATCH_QUEUE, 50)

    with ThreadPoolExecutor(max_workers=8) as threads:
        messages = [json.loads(m) for batch in threads.map(make, range(32)) for m in batch]
    ids = [_ids(m) for m in messages]
    assert all(task_id == root == correlation for task_id, root, correlation, _ in ids)
    assert len({i[0] for i in ids}) == len({i[3] for i in ids}) == len(messages) == 1600

"""Task events sent by many threads while the event loop flushes them all reach a receiver
(what Flower runs), through the real broker."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kombu import Connection

from tests.support.services import free_port, wait_for
from worker.jobs.celery_app import app
from worker.jobs.task_events import LockedBufferDispatcher

pytestmark = pytest.mark.usefixtures("services")

THREADS = 8
PER_THREAD = 1500


class Seen:
    """The task ids a receiver saw from one hostname's dispatcher."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self.ids: set[str] = set()

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("hostname") == self.hostname and event["type"].startswith("task-"):
            self.ids.add(event["uuid"])


@pytest.fixture
def seen() -> Iterator[Seen]:
    """A receiver on the broker's event exchange, consuming in a thread."""
    seen = Seen(f"events-{uuid.uuid4().hex}@test")
    with app.connection_for_read() as connection:
        receiver = app.events.Receiver(connection, handlers={"*": seen})
        thread = threading.Thread(target=lambda: receiver.capture(limit=None, wakeup=False))
        thread.start()
        try:
            yield seen
        finally:
            receiver.should_stop = True
            thread.join(timeout=10)


def test_the_app_dispatches_with_locked_buffers() -> None:
    assert issubclass(app.events.Dispatcher, LockedBufferDispatcher)


def test_no_buffered_event_is_lost_to_a_concurrent_flush(seen: Seen) -> None:
    with app.connection_for_write() as connection:
        dispatcher = app.events.Dispatcher(
            connection, hostname=seen.hostname, buffer_group=["task"]
        )

        def receiving() -> bool:
            dispatcher.send("task-received", uuid="probe")
            dispatcher.flush()
            return "probe" in seen.ids

        wait_for(receiving, timeout=10, interval=0.2)
        sent = [f"{n}-{i}" for n in range(THREADS) for i in range(PER_THREAD)]
        done = threading.Event()

        def send(n: int) -> None:
            for i in range(PER_THREAD):
                dispatcher.send("task-succeeded", uuid=f"{n}-{i}", result="{}", runtime=0.1)

        def flush() -> None:  # the worker's event loop, flushing as threads fill the buffer
            while not done.is_set():
                dispatcher.flush()

        flusher = threading.Thread(target=flush)
        senders = [threading.Thread(target=send, args=(n,)) for n in range(THREADS)]
        flusher.start()
        for thread in senders:
            thread.start()
        for thread in senders:
            thread.join()
        done.set()
        flusher.join()
        dispatcher.flush()

        def all_seen() -> bool:
            return seen.ids >= set(sent)

        try:
            wait_for(all_seen, timeout=30, interval=0.2)
        except TimeoutError:
            missing = set(sent) - seen.ids
            pytest.fail(f"{len(missing)} of {len(sent)} events never reached the receiver")


def test_a_flush_that_fails_keeps_the_events_when_not_buffering_offline() -> None:
    """Without `buffer_while_offline` a failed publish raises; the events stay buffered."""
    with Connection(f"redis://127.0.0.1:{free_port()}/0") as nowhere:
        dispatcher = app.events.Dispatcher(
            nowhere, hostname="nowhere@test", buffer_group=["task"], buffer_while_offline=False
        )
        dispatcher.send("task-succeeded", uuid="kept", result="{}", runtime=0.1)
        with pytest.raises(Exception):  # noqa: B017  (kombu's connection error, whichever)
            dispatcher.flush()
        assert [event["uuid"] for event in dispatcher._group_buffer["task"]] == ["kept"]
        dispatcher.close()  # as the worker does on reconnecting and at shutdown
        assert dispatcher.producer is None

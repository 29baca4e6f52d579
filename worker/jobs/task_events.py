"""Task events (what Flower shows) that survive a threads-pool worker's many threads.

Celery buffers a worker's `task-*` events in a list per group, and its event loop publishes
the list, then empties it. Threads of the pool append to that list without the dispatcher's
lock: an event appended while the list was on its way to Redis was emptied with it, unsent.
Flower then showed that task STARTED for ever (seen in the Flower tests: one delivery of
four). Celery's own fix (a newer release) arrives with a version this project stays below
(pyproject.toml), so the dispatcher here sends under the lock the flush holds, and the flush
sends a copy, so that a failed send keeps what it re-buffers.
"""

from __future__ import annotations

import threading
from typing import Any

from celery.app.events import Events
from celery.events.dispatcher import EventDispatcher


class LockedBufferDispatcher(EventDispatcher):  # type: ignore[misc]  # celery ships no types
    """`EventDispatcher` whose group buffers are filled and emptied under its lock.

    The lock is reentrant so that `send` can hold it around Celery's own `send`, which flushes
    (taking it again) when a buffer is full.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.mutex = threading.RLock()

    def send(self, *args: Any, **kwargs: Any) -> Any:
        """As `EventDispatcher.send`, under the lock: a buffered event is appended under it."""
        with self.mutex:
            return super().send(*args, **kwargs)

    def close(self) -> None:
        """As `EventDispatcher.close`, which releases its lock if held, which a reentrant lock
        held by another thread refuses: a thread still sending finishes instead."""
        self.producer = None

    def flush(self, errors: bool = True, groups: bool = True) -> None:
        """Publish what was re-buffered after a failed send, then each group's buffer."""
        if errors:
            with self.mutex:
                failed = list(self._outbound_buffer)
                self._outbound_buffer.clear()
                for event, routing_key, _ in failed:
                    self._publish(event, self.producer, routing_key)
        if groups:
            with self.mutex:
                for group, buffered in self._group_buffer.items():
                    if not buffered:
                        continue
                    events = list(buffered)
                    buffered.clear()
                    try:
                        self._publish(events, self.producer, f"{group}.multi")
                    except Exception:  # not buffering while offline: keep them for next time
                        buffered[:0] = events
                        raise


class LockedBufferEvents(Events):  # type: ignore[misc]
    """The app's events, dispatched by `LockedBufferDispatcher`."""

    dispatcher_cls = f"{__name__}:LockedBufferDispatcher"

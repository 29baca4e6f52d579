"""Task events (what Flower shows) that survive a threads-pool worker's many threads.

Celery buffers a worker's `task-*` events in a list per group, and its event loop publishes
the list, then empties it. Threads of the pool append to that list without the dispatcher's
lock: an event appended while the list was on its way to Redis was emptied with it, unsent.
Flower then showed that task STARTED for ever (seen in the Flower tests: one delivery of
four). Celery's own fix (a newer release) arrives with a version this project stays below
(pyproject.toml), so the dispatcher here appends under the lock the flush holds, and sends a
copy, so that a failed send keeps what it re-buffers.
"""

from __future__ import annotations

from typing import Any

from celery.app.events import Events
from celery.events.dispatcher import EventDispatcher
from celery.events.event import Event, group_from
from celery.utils.time import utcoffset


class LockedBufferDispatcher(EventDispatcher):  # type: ignore[misc]  # celery ships no types
    """`EventDispatcher` whose group buffers are filled and emptied under its lock."""

    def send(
        self,
        type: str,  # noqa: A002  (the parent's signature)
        blind: bool = False,
        retry: bool = False,
        retry_policy: Any = None,
        **fields: Any,
    ) -> Any:
        """As `EventDispatcher.send`; a buffered event is appended under the lock."""
        group = group_from(type)
        if not self.enabled or group not in self.buffer_group:
            return super().send(type, blind=blind, retry=retry, retry_policy=retry_policy, **fields)
        if self.groups and group not in self.groups:
            return None
        clock = self.clock.forward()
        event = Event(
            type, hostname=self.hostname, utcoffset=utcoffset(), pid=self.pid, clock=clock, **fields
        )
        with self.mutex:
            buffered = self._group_buffer[group]
            buffered.append(event)
            full = len(buffered) >= self.buffer_limit
        if full:
            self.flush()
        elif self.on_send_buffered:
            self.on_send_buffered()
        return None

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

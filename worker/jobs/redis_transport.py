"""kombu's Redis transport, with one client object per channel for its short commands.

kombu's Redis channel builds a new `redis.Redis` for every command it sends outside its
consume loop (each ack, each unacked-index update, each task event published for Flower):
`redis.Redis.__init__` builds its table of response callbacks each time, which measured 14 %
of a threads-pool worker's interpreter time at 20-30 retrievals a second (py-spy, GIL
samples). A `redis.Redis` is safe to share between threads (commands take connections from
its pool; pipelines are made per use), so one per channel serves every command, on the same
connection pool as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):  # type: ignore[misc]  # kombu ships no types
    _shared: Any = None
    _shared_lock = threading.Lock()

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        if self._shared is None:
            with self._shared_lock:
                if self._shared is None:
                    self._shared = self._create_client()
        yield self._shared


class Transport(kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel

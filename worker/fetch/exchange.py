"""The HTTP exchange behind a fetch, as received, for whoever archives it.

The fetcher notes the final hop of every page fetch and conditional request here
(`note`); nothing is kept unless the caller opened a `collecting()` scope in its thread, so a
process that archives nothing pays one context-variable read per fetch.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime

#: Raw header lines, names and values as bytes, in the order they came.
RawHeaders = tuple[tuple[bytes, bytes], ...]


@dataclass(frozen=True)
class Exchange:
    """One request and its response: status line and headers as sent and received."""

    url: str
    fetched_at: datetime
    request_headers: RawHeaders
    http_version: str
    status_code: int
    reason: str
    response_headers: RawHeaders
    #: The body decoded from its Content-Encoding, at most the fetch's byte bound (a 304: b"").
    body: bytes
    truncated: bool


_collector: ContextVar[list[Exchange] | None] = ContextVar("exchange_collector", default=None)


@contextmanager
def collecting() -> Iterator[list[Exchange]]:
    """Keep the exchanges this thread's fetches make inside the block, in order."""
    kept: list[Exchange] = []
    token = _collector.set(kept)
    try:
        yield kept
    finally:
        _collector.reset(token)


def wanted() -> bool:
    """Whether an exchange noted now would be kept."""
    return _collector.get() is not None


def note(exchange: Exchange) -> None:
    """Keep `exchange` if a `collecting()` scope is open in this context."""
    kept = _collector.get()
    if kept is not None:
        kept.append(exchange)

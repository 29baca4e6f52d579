"""research_get_image with its bytes: fetched off the request threads, bounded per key and in time.

An origin that drips an image one byte a second holds its fetch until the deadline. The fetch
used to run on one of the API's request threads (8), so eight such calls stalled every other
request of the process, /healthz included. Now:

* each fetch runs on a thread of its own bounded pool (EVIDENCE_IMAGE_FETCH_CONCURRENCY per
  process), never on a request thread, and the request holds no database session meanwhile;
* one key has at most EVIDENCE_IMAGE_FETCH_PER_KEY fetches running; one more is answered 429
  at once (and 503 when the whole pool is busy), both with Retry-After;
* a fetch ends within EVIDENCE_IMAGE_FETCH_TIMEOUT_SECONDS, whatever the origin does.

The fetch itself is the worker's guarded fetcher: the checked address is the one dialled,
every redirect is checked again, the body is bounded.

The errors keep to the get_image contract's codes (it has no `rate_limited`): the code is
`upstream_unavailable` and `details.reason` says `rate_limited`.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import anyio.to_thread

from api.auth import Principal
from api.errors import ApiError
from api.read_schemas import ImageGetRequest
from api.services import read
from api.services.thread_pools import LoopPool
from worker.fetch.image_bytes import ImageUnavailable, fetch_image
from worker.platform.settings import get_settings
from worker.store.db import read_only_session

#: Retry-After (seconds) when an image's bytes could not be fetched.
IMAGE_RETRY_AFTER_SECONDS = 30


class KeySlots:
    """How many image fetches each key has running (touched from the event loop only)."""

    def __init__(self) -> None:
        self._running: dict[uuid.UUID, int] = {}

    def running(self, key: uuid.UUID) -> int:
        return self._running.get(key, 0)

    @contextmanager
    def hold(self, key: uuid.UUID, limit: int, retry_after: int) -> Iterator[None]:
        """Hold one of `key`'s `limit` slots for the block, or refuse at once (429)."""
        if self.running(key) >= limit:
            raise ApiError(
                429,
                "upstream_unavailable",
                f"this API key already has {limit} image fetches running; retry later",
                details={"reason": "rate_limited", "retry_after_seconds": retry_after},
            )
        self._running[key] = self.running(key) + 1
        try:
            yield
        finally:
            left = self._running[key] - 1
            if left:
                self._running[key] = left
            else:
                del self._running[key]


slots = KeySlots()
#: The fetch pool's bound (its threads, per event loop).
_pool = LoopPool()


def _unavailable(exc: ImageUnavailable) -> ApiError:
    return ApiError(
        503,
        "upstream_unavailable",
        "the image could not be fetched as png, jpeg or webp",
        details={"reason": exc.reason},
    )


def _fetch(url: str, timeout: float) -> tuple[bytes, str]:
    # Imported on the first image: the fetcher's HTTP stack costs every API process memory.
    from worker.fetch import shared

    return fetch_image(shared.get_fetcher(), url, total_seconds=timeout)


def close_image_fetcher() -> None:
    """Close the fetcher image bytes came through (pooled TLS connections, a Redis client)."""
    # Imported here for the same reason as in `_fetch`.
    from worker.fetch import shared

    shared.close_fetcher()


async def image_bytes(principal: Principal, url: str) -> tuple[bytes, str]:
    """(bytes, format) of the image at `url`, within the per-key, pool and time bounds."""
    settings = get_settings()
    retry_after = math.ceil(settings.image_fetch_timeout_seconds)
    with slots.hold(principal.key_id, settings.image_fetch_per_key, retry_after):
        limiter = _pool.limiter(settings.image_fetch_concurrency)
        if limiter.available_tokens < 1:
            raise ApiError(
                503,
                "upstream_unavailable",
                "too many image fetches are running; retry later",
                details={"reason": "rate_limited", "retry_after_seconds": retry_after},
            )
        fetch = partial(_fetch, url, settings.image_fetch_timeout_seconds)
        try:
            # Not abandoned on cancel: the slot and the pool token stay taken until the
            # thread is done, so the bounds count every fetch really running.
            return await anyio.to_thread.run_sync(fetch, limiter=limiter)
        except ImageUnavailable as exc:
            raise _unavailable(exc) from None


def _find(principal: Principal, request: ImageGetRequest) -> dict[str, Any] | None:
    with read_only_session() as session:
        return read.find_image(session, principal, request)


async def get_image(principal: Principal, request: ImageGetRequest) -> dict[str, Any]:
    """research_get_image: one image by id, with its checked bytes when asked for.

    The lookup takes a request thread briefly; the fetch never does.
    """
    image = await anyio.to_thread.run_sync(_find, principal, request)
    if image is None or not request.include_bytes:
        return read.image_payload(image)
    body, image["format"] = await image_bytes(principal, image["url"])
    return read.image_payload(image, body)


def retry_after(error: ApiError) -> int:
    """Seconds a client should wait before asking again after `error`."""
    seconds = (error.details or {}).get("retry_after_seconds")
    return seconds if isinstance(seconds, int) else IMAGE_RETRY_AFTER_SECONDS

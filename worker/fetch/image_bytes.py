"""An image's bytes, fetched through the guarded fetcher and checked by their magic numbers."""

from __future__ import annotations

from typing import Protocol

from worker.fetch.types import FetchedResponse, FetchFailure

#: Bytes read at most for one image.
MAX_IMAGE_BYTES = 5 * 1024 * 1024


class MediaFetcher(Protocol):
    """What fetching an image needs from a fetcher."""

    def fetch_media(
        self, url: str, max_bytes: int, total_seconds: float | None = None
    ) -> FetchedResponse: ...


class ImageUnavailable(Exception):
    """Raised when an image's bytes cannot be given: `reason` says why (a contract reason)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def sniff_image(body: bytes) -> str | None:
    """The format the bytes really are (png, jpeg, webp), whatever the server claimed."""
    if body.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if body.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if len(body) >= 12 and body[:4] == b"RIFF" and body[8:12] == b"WEBP":
        return "webp"
    return None


def fetch_image(
    fetcher: MediaFetcher,
    url: str,
    max_bytes: int = MAX_IMAGE_BYTES,
    total_seconds: float | None = None,
) -> tuple[bytes, str]:
    """(bytes, format) of a png, jpeg or webp image, or ImageUnavailable."""
    try:
        response = fetcher.fetch_media(url, max_bytes, total_seconds)
    except FetchFailure as failure:
        raise ImageUnavailable(failure.reason.value) from None
    if response.truncated:
        raise ImageUnavailable("response_too_large")
    image_format = sniff_image(response.body)
    if image_format is None:
        raise ImageUnavailable("unsupported_media")
    return response.body, image_format

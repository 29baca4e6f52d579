"""The content pipeline plus the page's assets (images), for the read side."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from worker import clock
from worker.fetch_types import FetchedResponse
from worker.images import ImageRef, extract_images
from worker.pipeline import HTML_MIME_TYPES, FetcherLike, Kind, run_pipeline
from worker.results import has_content
from worker.text_clean import decode_body


@dataclass(frozen=True)
class PipelineOutput:
    """A retrieval's `result` and the images of the page it came from."""

    result: dict[str, Any]
    images: tuple[ImageRef, ...] = ()


class _FirstResponse:
    """A fetcher that remembers the first response it returned (the page itself)."""

    def __init__(self, fetcher: FetcherLike) -> None:
        self.fetcher = fetcher
        self.first: FetchedResponse | None = None

    def fetch(self, url: str) -> FetchedResponse:
        response = self.fetcher.fetch(url)
        if self.first is None:
            self.first = response
        return response


def page_images(response: FetchedResponse | None) -> tuple[ImageRef, ...]:
    """The images of an HTML response (none for other media)."""
    if response is None or response.mime_type not in HTML_MIME_TYPES:
        return ()
    return tuple(extract_images(decode_body(response.body, response.charset), response.url))


def run_pipeline_with_assets(
    fetcher: FetcherLike,
    url: str,
    kind: Kind,
    language: str | None,
    *,
    now: Callable[[], datetime] = clock.now,
) -> PipelineOutput:
    """`run_pipeline`, plus the page's images when the result has content."""
    recorder = _FirstResponse(fetcher)
    result = run_pipeline(recorder, url, kind, language, now=now)
    images = page_images(recorder.first) if has_content(result) else ()
    return PipelineOutput(result, images)

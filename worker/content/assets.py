"""The content pipeline plus the page's assets (images), for the read side."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from worker import clock
from worker.content.images import ImageRef, images_from_tree
from worker.content.pipeline import (
    HTML_MIME_TYPES,
    FetcherLike,
    HtmlPage,
    Kind,
    run_pipeline_with_page,
)
from worker.content.results import has_content


@dataclass(frozen=True)
class PipelineOutput:
    """A retrieval's `result` and the images of the page it came from."""

    result: dict[str, Any]
    images: tuple[ImageRef, ...] = ()


def page_images(page: HtmlPage | None) -> tuple[ImageRef, ...]:
    """The images of a page served as HTML, read from the tree the pipeline already parsed.

    None for other media, nor for a body only sniffed as markup (no declared HTML type).
    """
    if page is None or page.tree is None or page.mime_type not in HTML_MIME_TYPES:
        return ()
    return tuple(images_from_tree(page.tree, page.url))


def run_pipeline_with_assets(
    fetcher: FetcherLike,
    url: str,
    kind: Kind,
    language: str | None,
    *,
    now: Callable[[], datetime] = clock.now,
) -> PipelineOutput:
    """`run_pipeline`, plus the page's images when the result has content."""
    run = run_pipeline_with_page(fetcher, url, kind, language, now=now)
    images = page_images(run.page) if has_content(run.result) else ()
    return PipelineOutput(run.result, images)

"""The content pipeline: fetch a URL and turn the response into the contract's `result`.

`run_pipeline` is the one entry point: the `result`, and the images of the HTML page it came
from (for the read side), read from the tree extraction already parsed.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol

import lxml.html

from worker.content.captions import CaptionError, parse_captions, sniff_format
from worker.content.decoding import decode_body
from worker.content.html import declared_language, extract_html
from worker.content.images import ImageRef, images_from_tree
from worker.content.markup import parse_bounded
from worker.content.results import (
    Content,
    Result,
    content_result,
    failure_result,
    has_content,
)
from worker.content.text import clean_text
from worker.content.tracks import find_tracks, is_platform_url, pick_track
from worker.domain import clock
from worker.domain.languages import is_mismatch, normalise_tag
from worker.domain.reasons import FAILURE_STATUS, Reason
from worker.fetch.types import FetchedResponse, FetchFailure

Kind = Literal["url_text", "published_captions"]
HTML_MIME_TYPES = frozenset({"text/html", "application/xhtml+xml"})


class FetcherLike(Protocol):
    """What the pipeline needs from a fetcher."""

    def fetch(self, url: str) -> FetchedResponse: ...


@dataclass(frozen=True)
class HtmlPage:
    """The HTML page a retrieval fetched first, parsed once: final URL, media type, tree."""

    url: str
    mime_type: str | None
    #: None when the body held no markup.
    tree: lxml.html.HtmlElement | None


@dataclass(frozen=True)
class PipelineRun:
    """A retrieval's `result`, and its HTML page when the URL answered with one."""

    result: Result
    page: HtmlPage | None = None


@dataclass(frozen=True)
class PipelineOutput:
    """A retrieval's `result` and the images of the page it came from."""

    result: Result
    images: tuple[ImageRef, ...] = ()


def run_pipeline(
    fetcher: FetcherLike,
    url: str,
    kind: Kind,
    language: str | None,
    *,
    now: Callable[[], datetime] = clock.now,
) -> PipelineOutput:
    """Fetch `url`: the `result` of a `kind` retrieval, and its page's images if it has content."""
    run = _run(fetcher, url, kind, language, now)
    images = page_images(run.page) if has_content(run.result) else ()
    return PipelineOutput(run.result, images)


def page_images(page: HtmlPage | None) -> tuple[ImageRef, ...]:
    """The images of a page served as HTML, read from the tree the pipeline already parsed.

    None for other media, nor for a body only sniffed as markup (no declared HTML type).
    """
    if page is None or page.tree is None or page.mime_type not in HTML_MIME_TYPES:
        return ()
    return tuple(images_from_tree(page.tree, page.url))


def _run(
    fetcher: FetcherLike,
    url: str,
    kind: Kind,
    language: str | None,
    now: Callable[[], datetime],
) -> PipelineRun:
    """The result, keeping the parsed HTML page so its images need no second parse."""
    if kind == "published_captions" and is_platform_url(url):
        return PipelineRun(failure_result(kind, Reason.UNSUPPORTED_SOURCE, now()))
    try:
        response = fetcher.fetch(url)
    except FetchFailure as failure:
        return PipelineRun(fetch_failure_result(kind, failure, now()))
    if kind == "url_text":
        return _url_text(response, language, now())
    return _captions(fetcher, response, language, now)


def fetch_failure_result(kind: Kind, failure: FetchFailure, at: datetime) -> Result:
    """The result of a fetch that raised: its reason, final URL and Retry-After."""
    reason = failure.reason if failure.reason in FAILURE_STATUS else Reason.UNAVAILABLE
    return failure_result(
        kind,
        reason,
        at,
        content=Content(source_url=failure.source_url),
        warnings=failure.warnings,
        retry_after_seconds=failure.retry_after_seconds,
    )


def _is_html(response: FetchedResponse) -> bool:
    if response.mime_type in HTML_MIME_TYPES:
        return True
    return response.mime_type is None and response.body.lstrip()[:1] == b"<"


def _finish(kind: Kind, content: Content, truncated: bool, at: datetime) -> Result:
    """Build the result, reporting a byte-capped body as response_too_large."""
    if truncated:
        content.reasons.insert(0, Reason.RESPONSE_TOO_LARGE)
        if not content.text and not content.segments:
            others = [r for r in content.reasons if r is not Reason.RESPONSE_TOO_LARGE]
            return failure_result(
                kind, Reason.RESPONSE_TOO_LARGE, at, content=content, warnings=others
            )
    return content_result(kind, content, at)


def _check_language(content: Content, requested: str | None) -> None:
    if is_mismatch(requested, content.language) and Reason.LANGUAGE_MISMATCH not in content.reasons:
        content.reasons.append(Reason.LANGUAGE_MISMATCH)


def _url_text(response: FetchedResponse, language: str | None, at: datetime) -> PipelineRun:
    kind: Kind = "url_text"
    if not _is_html(response):
        return PipelineRun(_text_file(response, language, at))
    extraction = extract_html(
        response.body,
        response.url,
        response.headers,
        language,
        charset=response.charset,
        mime_type=response.mime_type,
    )
    page = HtmlPage(response.url, response.mime_type, extraction.tree)
    if extraction.blocked:
        result = failure_result(kind, extraction.blocked, at, content=extraction.content)
        return PipelineRun(result, page)
    return PipelineRun(_finish(kind, extraction.content, response.truncated, at), page)


def _text_file(response: FetchedResponse, language: str | None, at: datetime) -> Result:
    """url_text of a response that is not HTML: plain text, or a caption file's text."""
    kind: Kind = "url_text"
    text = decode_body(response.body, response.charset, html=False)
    caption_format = sniff_format(text, response.mime_type, response.url)
    content = Content(
        source_url=response.url,
        mime_type=response.mime_type,
        content_kind="document_text",
        language=normalise_tag(response.headers.get("content-language")),
    )
    if caption_format:
        try:
            parsed = parse_captions(text, caption_format, content.language)
        except CaptionError as error:
            if response.truncated:
                return _finish(kind, content, True, at)
            return failure_result(kind, error.reason, at, content=content)
        content.text, content.language = parsed.text, parsed.language
        content.caption_format = caption_format
        content.reasons.extend(parsed.reasons)
    else:
        content.text = clean_text(text)
    if not content.text:
        content.content_kind = "none"
    _check_language(content, language)
    return _finish(kind, content, response.truncated, at)


def _captions(
    fetcher: FetcherLike,
    response: FetchedResponse,
    language: str | None,
    now: Callable[[], datetime],
) -> PipelineRun:
    if not _is_html(response):
        return PipelineRun(_caption_file(response, language, None, now()))
    tree, _ = parse_bounded(decode_body(response.body, response.charset))
    page = HtmlPage(response.url, response.mime_type, tree)
    return PipelineRun(_track_captions(fetcher, response, page.tree, language, now), page)


def _track_captions(
    fetcher: FetcherLike,
    response: FetchedResponse,
    tree: lxml.html.HtmlElement | None,
    language: str | None,
    now: Callable[[], datetime],
) -> Result:
    """published_captions of an HTML page: the caption file of its best `<track>`."""
    kind: Kind = "published_captions"
    content = Content(source_url=response.url, mime_type=response.mime_type)
    track = pick_track(find_tracks(tree, response.url) if tree is not None else [], language)
    if track is None:
        content.language = declared_language(tree, response.headers)
        reason = Reason.RESPONSE_TOO_LARGE if response.truncated else Reason.NO_CAPTIONS
        return failure_result(kind, reason, now(), content=content)
    if is_platform_url(track.url):
        return failure_result(kind, Reason.UNSUPPORTED_SOURCE, now(), content=content)
    try:
        caption_response = fetcher.fetch(track.url)
    except FetchFailure as failure:
        return fetch_failure_result(kind, failure, now())
    return _caption_file(caption_response, language, track.srclang, now())


def _caption_file(
    response: FetchedResponse, language: str | None, srclang: str | None, at: datetime
) -> Result:
    """A caption file fetched for published_captions."""
    kind: Kind = "published_captions"
    content = Content(source_url=response.url, mime_type=response.mime_type)
    text = decode_body(response.body, response.charset, html=False)
    caption_format = sniff_format(text, response.mime_type, response.url)
    if caption_format is None or _is_html(response):
        return failure_result(kind, Reason.UNSUPPORTED_CONTENT, at, content=content)
    content.caption_format = caption_format
    try:
        parsed = parse_captions(text, caption_format, srclang)
    except CaptionError as error:
        if response.truncated:
            return _finish(kind, content, True, at)
        return failure_result(kind, error.reason, at, content=content)
    content.text, content.segments = parsed.text, parsed.segments
    content.content_kind = "published_caption_file"
    content.language = parsed.language
    content.reasons.extend(parsed.reasons)
    _check_language(content, language)
    return _finish(kind, content, response.truncated, at)

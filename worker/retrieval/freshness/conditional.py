"""Conditional requests: the validators a fetch leaves, and what a 304 may stand for.

A retrieval remembers, for every URL its pipeline fetched, the response's validators (ETag,
Last-Modified; RFC 9110 §8.8). A later retrieval of the same request sends them back
(If-None-Match, If-Modified-Since) through the same guarded fetcher. A 304 stands for the stored
revision only when this module says so (`accept_not_modified`): a validator was sent, and the
304 came from the URL the stored one came from. The origin's word is trusted: a page changed
under an unchanged ETag stays the stored revision until the origin changes its validator.

`RecordingFetcher` notes validators as the pipeline fetches; `PrimedFetcher` hands the pipeline
what a conditional request already brought back in full (a 200 or a failure), so a changed
page is downloaded once, not twice.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Protocol, TypedDict

from worker.fetch.egress import deadline_scope
from worker.fetch.types import FetchedResponse, FetchFailure, NotModified


class Validator(TypedDict):
    """What one fetch of a retrieval left to revalidate it with."""

    #: The URL the pipeline asked for (a page, then perhaps its caption file).
    url: str
    #: Where its redirects ended.
    final_url: str
    etag: str | None
    last_modified: str | None


class FetcherLike(Protocol):
    """What the pipeline needs from a fetcher."""

    def fetch(self, url: str) -> FetchedResponse: ...


def validator_of(url: str, response: FetchedResponse) -> Validator:
    """The validators `response` (fetched for `url`) carries; None where the origin sent none."""
    return {
        "url": url,
        "final_url": response.url,
        "etag": response.headers.get("etag") or None,
        "last_modified": response.headers.get("last-modified") or None,
    }


def conditional_headers(validator: Validator) -> dict[str, str]:
    """If-None-Match and If-Modified-Since for what `validator` holds (none: an empty dict).

    The ETag goes back as it came, weak (`W/"…"`) or strong: If-None-Match compares weakly.
    """
    headers = {}
    if validator["etag"]:
        headers["If-None-Match"] = validator["etag"]
    if validator["last_modified"]:
        headers["If-Modified-Since"] = validator["last_modified"]
    return headers


def can_revalidate(validators: Sequence[Validator]) -> bool:
    """True when every URL the retrieval fetched left at least one validator.

    With one URL lacking both (an origin that sends neither), a 304 could not prove the whole
    result unchanged: the retrieval is a full one.
    """
    return bool(validators) and all(conditional_headers(v) for v in validators)


def accept_not_modified(
    sent: Mapping[str, str], validator: Validator, answer: NotModified | FetchedResponse
) -> bool:
    """Whether `answer` confirms the stored response `validator` describes.

    Only a 304 (`NotModified`) to a request that sent a validator, from the same final URL the
    stored response came from (redirects may move; a 304 from elsewhere proves nothing here).
    """
    if not isinstance(answer, NotModified) or not sent:
        return False
    # Both are the guard's parsed form of the final hop's URL, so they compare as strings.
    return answer.url == validator["final_url"]


def updated(validator: Validator, answer: NotModified) -> Validator:
    """`validator` with the fresher validators a 304 may carry (RFC 9110 §15.4.5)."""
    return {
        **validator,
        "etag": answer.headers.get("etag") or validator["etag"],
        "last_modified": answer.headers.get("last-modified") or validator["last_modified"],
    }


class RecordingFetcher:
    """Note the validators of every successful fetch the pipeline makes, in order."""

    def __init__(self, inner: FetcherLike) -> None:
        self.inner = inner
        self.validators: list[Validator] = []

    def fetch(self, url: str) -> FetchedResponse:
        """Fetch through the wrapped fetcher; remember the response's validators."""
        response = self.inner.fetch(url)
        self.validators.append(validator_of(url, response))
        return response


class PrimedFetcher:
    """Answer a URL once from what a conditional request brought back; fetch the rest.

    The fetches it makes end by `deadline` (a `time.monotonic()` instant): the conditional
    requests and the full retrieval after them share one fetch deadline, so revalidating never
    lengthens a retrieval past the bounds its time limits and lease are built on.
    """

    def __init__(
        self,
        inner: FetcherLike,
        primed: Mapping[str, FetchedResponse | FetchFailure],
        deadline: float,
    ) -> None:
        self.inner = inner
        self.primed = dict(primed)
        self.deadline = deadline

    def fetch(self, url: str) -> FetchedResponse:
        """The primed answer for `url` (once), else a fetch by the wrapped fetcher."""
        answer = self.primed.pop(url, None)
        if answer is None:
            with deadline_scope(max(0.0, self.deadline - time.monotonic())):
                return self.inner.fetch(url)
        if isinstance(answer, FetchFailure):
            raise answer
        return answer

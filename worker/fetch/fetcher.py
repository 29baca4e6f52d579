"""The bounded, guarded fetcher: one per worker process, reused across retrievals.

`Fetcher.fetch(url)` returns a bounded `FetchedResponse` or raises `FetchFailure` with a
contract reason. Every hop (redirects and robots.txt included) passes `fetch_guard`, every
connection goes through `egress.GuardedBackend`, and errors are translated once, by
`errors.map_fetch_errors`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from urllib.parse import urljoin

import httpcore
import httpx

from worker.domain import clock
from worker.domain.reasons import Reason
from worker.fetch import errors, exchange
from worker.fetch.egress import (
    GuardedBackend,
    Resolver,
    deadline_scope,
    guarded_client,
    make_decoder,
    remaining_seconds,
)
from worker.fetch.errors import Trail, map_fetch_errors
from worker.fetch.guard import MAX_REDIRECTS, REDIRECT_STATUSES, ParsedTarget, Verdict, guard_url
from worker.fetch.media import ALLOWED_MIME_TYPES, media_type, parse_content_type
from worker.fetch.politeness import Politeness, SharedState
from worker.fetch.robots import ROBOTS_MAX_BYTES, RobotsAnswer, RobotsPolicy
from worker.fetch.types import FetchedResponse, FetchFailure, NotModified
from worker.platform.settings import Settings

#: Response headers accepted at most (their total size is capped by h11 at 100 KiB).
MAX_RESPONSE_HEADERS = 256
#: Bytes read from a redirect's body before moving on (lets the connection be reused).
REDIRECT_DRAIN_BYTES = 16 * 1024
#: Raw (still encoded) bytes read at most, as a multiple of the decoded byte bound.
RAW_BYTES_FACTOR = 2
#: How long an idle pooled connection is kept, in seconds. Each host keeps up to its
#: politeness limit of them (`EVIDENCE_FETCH_PER_HOST_LIMIT`: no more of its fetches run at once).
KEEPALIVE_EXPIRY_SECONDS = 30.0

#: How long past the fetch deadline a politeness slot outlives its holder, in seconds.
SLOT_LEASE_MARGIN_SECONDS = 1.0
#: Not Modified: the answer to a conditional GET whose validators still match.
NOT_MODIFIED = 304

ACCEPT = (
    "text/html,application/xhtml+xml;q=0.9,text/vtt;q=0.9,application/x-subrip;q=0.9,"
    "text/plain;q=0.8,*/*;q=0.1"
)
ACCEPT_ENCODING = "gzip, deflate, br"


def _note(url: str, response: httpx.Response, body: bytes, *, truncated: bool) -> None:
    """Hand the exchange to an archiving caller (`worker.fetch.exchange`), if one listens."""
    if not exchange.wanted():
        return
    exchange.note(
        exchange.Exchange(
            url=url,
            fetched_at=clock.now(),
            request_headers=tuple(response.request.headers.raw),
            http_version=response.http_version,
            status_code=response.status_code,
            reason=response.reason_phrase,
            response_headers=tuple(response.headers.raw),
            body=body,
            truncated=truncated,
        )
    )


class Fetcher:
    """One per worker process: a pooled, guarded HTTPS client with all fetch bounds."""

    def __init__(
        self,
        settings: Settings,
        *,
        resolver: Resolver | None = None,
        dialer: httpcore.NetworkBackend | None = None,
        politeness: Politeness | None = None,
    ) -> None:
        self.settings = settings
        self.backend = GuardedBackend(
            settings.egress_allow_cidrs, settings.fetch_allowed_ports, resolver, dialer
        )
        # No cap of its own on connections (httpcore's default is 10): the retrievals in flight
        # and the per-host politeness limit bound them.
        self.client = guarded_client(
            self.backend,
            ca_bundle=str(settings.ca_bundle) if settings.ca_bundle else None,
            read_timeout=settings.fetch_read_timeout_seconds,
            connect_timeout=settings.fetch_connect_timeout_seconds,
            headers={
                "User-Agent": settings.user_agent,
                "Accept": ACCEPT,
                "Accept-Encoding": ACCEPT_ENCODING,
            },
            max_keepalive=settings.fetch_per_host_limit,
            keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS,
        )
        # Politeness passed in belongs to the caller; the Redis client made here is closed here.
        self._own_state: SharedState | None = None
        if politeness is None:
            self._own_state = SharedState(settings.politeness_redis_url)
            # A slot is held for one hop of one fetch, which ends by the fetch's total deadline:
            # a slot left behind by a killed worker (with up to the per-host limit of each
            # host's slots when it ran hundreds of fetches) frees soon after, not minutes later.
            lease = settings.fetch_total_timeout_seconds + SLOT_LEASE_MARGIN_SECONDS
            politeness = Politeness(
                self._own_state,
                per_host_limit=settings.fetch_per_host_limit,
                slot_lease_seconds=lease,
            )
        self.politeness = politeness
        self.robots = RobotsPolicy(self.politeness.state, settings.user_agent, self._fetch_robots)

    def fetch(self, url: str) -> FetchedResponse:
        """GET `url` within every bound; the response or a `FetchFailure`."""
        trail = Trail()
        with (
            deadline_scope(self.settings.fetch_total_timeout_seconds),
            map_fetch_errors(trail),
            self._follow(url, trail, robots=self.settings.robots_txt) as (target, response),
        ):
            return self._finish(target, response)

    def revalidate(self, url: str, headers: Mapping[str, str]) -> FetchedResponse | NotModified:
        """GET `url` with conditional `headers` (If-None-Match, If-Modified-Since), within
        every bound `fetch` applies: a 304's final URL and headers, or the full response.

        Whether a 304 may stand for a stored revision is the caller's decision
        (`worker.retrieval.freshness.conditional.accept_not_modified`).
        """
        trail = Trail()
        with (
            deadline_scope(self.settings.fetch_total_timeout_seconds),
            map_fetch_errors(trail),
            self._follow(url, trail, robots=self.settings.robots_txt, headers=headers) as (
                target,
                response,
            ),
        ):
            if response.status_code == NOT_MODIFIED:
                # A 304 has no body (h11 enforces it); reading its end lets the connection
                # go back to the pool instead of being closed with an unfinished response.
                self._read_body(response, REDIRECT_DRAIN_BYTES)
                lowered = {k.lower(): v for k, v in response.headers.multi_items()}
                _note(target.url, response, b"", truncated=False)
                return NotModified(url=target.url, headers=lowered)
            return self._finish(target, response)

    def fetch_media(
        self, url: str, max_bytes: int, total_seconds: float | None = None
    ) -> FetchedResponse:
        """GET a media file (an image) within every bound; its type is left to the caller.

        The declared Content-Type is not trusted either way: `mime_type` is None, and the
        caller checks the bytes themselves. `total_seconds` replaces the total fetch deadline
        (the API gives image bytes a shorter one than retrievals get).
        """
        trail = Trail()
        with (
            deadline_scope(total_seconds or self.settings.fetch_total_timeout_seconds),
            map_fetch_errors(trail),
            self._follow(url, trail, robots=self.settings.robots_txt) as (target, response),
        ):
            self._raise_for_status(target, response)
            body, truncated = self._read_body(response, max_bytes)
            return FetchedResponse(
                url=target.url,
                status_code=response.status_code,
                headers={k.lower(): v for k, v in response.headers.multi_items()},
                body=body,
                truncated=truncated,
                mime_type=None,
            )

    def close(self) -> None:
        """Close pooled connections and the Redis client this fetcher made."""
        self.client.close()
        if self._own_state is not None:
            self._own_state.close()

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Internals.
    def _guard(self, url: str) -> ParsedTarget:
        target = guard_url(url, self.settings.fetch_allowed_ports, self.settings.egress_allow_cidrs)
        if isinstance(target, Verdict):
            raise FetchFailure(Reason.UNSAFE_URL, target.reason)
        return target

    @contextmanager
    def _follow(
        self, url: str, trail: Trail, *, robots: bool, headers: Mapping[str, str] | None = None
    ) -> Iterator[tuple[ParsedTarget, httpx.Response]]:
        """Follow up to MAX_REDIRECTS redirects, each hop guarded; yield the final response.

        `headers` (conditional ones) go with every hop.
        """
        seen: set[str] = set()
        for _hop in range(MAX_REDIRECTS + 1):
            target = self._guard(url)
            if target.url in seen:
                raise FetchFailure(Reason.UNAVAILABLE, f"redirect loop at {target.url}")
            seen.add(target.url)
            if robots:
                if not self.robots.memoized(target.origin):  # it may fetch robots.txt first
                    self.politeness.check_backoff(target.origin, target.url)
                self.robots.check(target)
            wait = max(0.0, remaining_seconds() or 0.0)
            with (
                self.politeness.slot(target.origin, wait),
                self.client.stream("GET", target.url, headers=headers) as response,
            ):
                trail.responded_url = target.url
                location = response.headers.get("location")
                if response.status_code not in REDIRECT_STATUSES or location is None:
                    yield target, response
                    return
                for _ in response.iter_raw(REDIRECT_DRAIN_BYTES):
                    break
            url = urljoin(target.url, location.strip())
        raise FetchFailure(Reason.UNAVAILABLE, f"more than {MAX_REDIRECTS} redirects")

    def _raise_for_status(self, target: ParsedTarget, response: httpx.Response) -> None:
        """Raise the status's failure; a 429 also backs every worker off the origin."""
        failure = errors.status_failure(
            response.status_code, target.url, response.headers.get("retry-after")
        )
        if failure is None:
            return
        if failure.reason is Reason.RATE_LIMITED and failure.retry_after_seconds:
            self.politeness.record_backoff(target.origin, failure.retry_after_seconds)
        raise failure

    def _finish(self, target: ParsedTarget, response: httpx.Response) -> FetchedResponse:
        self._raise_for_status(target, response)
        if len(response.headers.raw) > MAX_RESPONSE_HEADERS:
            raise FetchFailure(Reason.UNAVAILABLE, "too many response headers", target.url)
        declared, charset = parse_content_type(response.headers.get("content-type"))
        if declared and declared not in ALLOWED_MIME_TYPES:
            raise FetchFailure(Reason.UNSUPPORTED_MEDIA, f"content type {declared}", target.url)
        body, truncated = self._read_body(response, self.settings.fetch_max_bytes)
        mime = media_type(declared, body, target.path)
        _note(target.url, response, body, truncated=truncated)
        return FetchedResponse(
            url=target.url,
            status_code=response.status_code,
            headers={k.lower(): v for k, v in response.headers.multi_items()},
            body=body,
            truncated=truncated,
            mime_type=mime,
            charset=charset,
        )

    def _read_body(self, response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
        """Read at most `max_bytes` decoded bytes; True if there was more (or too much raw)."""
        try:
            decoder = make_decoder(response.headers.get("content-encoding"))
        except ValueError as exc:
            raise FetchFailure(Reason.UNAVAILABLE, str(exc)) from exc
        body = bytearray()
        raw_seen = 0
        raw_limit = max_bytes * RAW_BYTES_FACTOR
        for chunk in response.iter_raw():
            raw_seen += len(chunk)
            body += decoder.feed(chunk, max_bytes + 1 - len(body))
            if len(body) > max_bytes or raw_seen > raw_limit:
                return bytes(body[:max_bytes]), True
            left = remaining_seconds()
            if left is not None and left <= 0:
                raise FetchFailure(Reason.TIMEOUT, "total fetch deadline exceeded while reading")
        body += decoder.flush(max_bytes + 1 - len(body))
        if len(body) > max_bytes:
            return bytes(body[:max_bytes]), True
        return bytes(body), False

    def _fetch_robots(self, url: str) -> RobotsAnswer:
        """Fetch robots.txt through the same guard and bounds (RFC 9309 status handling)."""
        trail = Trail()
        try:
            with (
                map_fetch_errors(trail),
                self._follow(url, trail, robots=False) as (
                    target,
                    response,
                ),
            ):
                if response.status_code == 429:
                    self._finish(target, response)
                body = b""
                if 200 <= response.status_code < 300:
                    body, _ = self._read_body(response, ROBOTS_MAX_BYTES)
                return RobotsAnswer.from_response(response.status_code, body)
        except FetchFailure as failure:
            if failure.reason in (Reason.UNSAFE_URL, Reason.UNAVAILABLE):
                return RobotsAnswer.from_response(404, b"")
            failure.detail = f"robots.txt: {failure.detail}"
            raise

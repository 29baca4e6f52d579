"""Classification at the edge: exceptions and HTTP statuses to contract reasons.

Everything the network can throw is translated here, once (`map_fetch_errors`), so the rest
of the service only ever sees `FetchFailure` with a contract `Reason`. Media types and body
sniffing are in `worker.fetch.media`.
"""

from __future__ import annotations

import ssl
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import brotli
import httpcore
import httpx
import structlog

from worker.domain.reasons import Reason
from worker.fetch.egress import EgressBlocked, ResolutionFailed
from worker.fetch.types import FetchFailure

log = structlog.get_logger(__name__)

#: Retry-After used when the header is absent or unparseable, in seconds.
DEFAULT_RETRY_AFTER_SECONDS = 60
#: Bounds applied to any Retry-After, in seconds.
MIN_RETRY_AFTER_SECONDS = 1
MAX_RETRY_AFTER_SECONDS = 86_400


@dataclass
class Trail:
    """Where a fetch got to, for `source_url` of failures."""

    responded_url: str | None = None


@contextmanager
def map_fetch_errors(trail: Trail) -> Iterator[None]:
    """Translate network, TLS, protocol and decoding errors into `FetchFailure` (once)."""
    try:
        yield
    except FetchFailure as failure:
        if failure.source_url is None:
            failure.source_url = trail.responded_url
        if failure.reason is Reason.UNSAFE_URL:
            _log_refusal(failure.detail)
        raise
    except EgressBlocked as exc:
        _log_refusal(str(exc))
        raise FetchFailure(Reason.UNSAFE_URL, str(exc), trail.responded_url) from exc
    except ResolutionFailed as exc:
        raise FetchFailure(Reason.EGRESS_UNAVAILABLE, f"DNS: {exc}", trail.responded_url) from exc
    except (httpcore.TimeoutException, httpx.TimeoutException) as exc:
        detail = str(exc) or type(exc).__name__
        raise FetchFailure(Reason.TIMEOUT, detail, trail.responded_url) from exc
    except (httpcore.ConnectError, httpx.ConnectError, ssl.SSLError) as exc:
        detail = f"connect/TLS: {exc or type(exc).__name__}"
        raise FetchFailure(Reason.EGRESS_UNAVAILABLE, detail, trail.responded_url) from exc
    except (httpcore.ProtocolError, httpcore.NetworkError, httpx.TransportError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise FetchFailure(Reason.UNAVAILABLE, detail, trail.responded_url) from exc
    except (zlib.error, brotli.error) as exc:
        detail = f"corrupt content-encoding: {exc}"
        raise FetchFailure(Reason.UNAVAILABLE, detail, trail.responded_url) from exc
    except httpx.InvalidURL as exc:
        raise FetchFailure(Reason.UNSAFE_URL, str(exc), trail.responded_url) from exc


def _log_refusal(rule: str) -> None:
    """Say which guard rule refused a target (the result only says `unsafe_url`): an attempt at
    a metadata service or a private network is worth an operator's attention. The rule names the
    host or address, never the URL, whose query may carry tokens."""
    log.warning("egress_refused", rule=rule)


def parse_retry_after(value: str | None, now: datetime | None = None) -> int:
    """Seconds to wait from a Retry-After value (delta or HTTP-date), clamped; default 60."""
    text = (value or "").strip()
    seconds: float | None = None
    if text.isdigit() and text.isascii():
        seconds = int(text[:12])
    elif text:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            when = None
        if when is not None:
            when = when if when.tzinfo else when.replace(tzinfo=UTC)
            seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds is None:
        return DEFAULT_RETRY_AFTER_SECONDS
    return int(min(max(seconds, MIN_RETRY_AFTER_SECONDS), MAX_RETRY_AFTER_SECONDS))


def status_failure(status: int, url: str, retry_after: str | None = None) -> FetchFailure | None:
    """The failure a final (non-redirect) status means, or None for 2xx."""
    if 200 <= status < 300:
        return None
    detail = f"HTTP {status}"
    if status in (401, 403):
        return FetchFailure(Reason.ACCESS_DENIED, detail, url)
    if status in (404, 410):
        return FetchFailure(Reason.NOT_FOUND, detail, url)
    if status == 429:
        seconds = parse_retry_after(retry_after)
        return FetchFailure(Reason.RATE_LIMITED, detail, url, retry_after_seconds=seconds)
    return FetchFailure(Reason.UNAVAILABLE, detail, url)

"""POST one webhook through the same egress guard as a retrieval's fetch.

The destination is a caller's input, so it gets what a fetch gets: `guard_url` (public HTTPS
on an allowed port, no userinfo, no private literal), a connection only to addresses the
`GuardedBackend` checked (and dialled by address, so DNS cannot rebind), verified TLS, and a
total deadline over connect, send and read. Redirects are refused: a receiver answers where it
is registered, and following one would re-send a signed body somewhere nobody registered. The
response body is read up to `MAX_RESPONSE_BYTES` (enough for an error snippet) and dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpcore
import httpx

from worker.domain.safe_text import storable
from worker.fetch.egress import GuardedBackend, deadline_scope, guarded_client
from worker.fetch.errors import Trail, map_fetch_errors
from worker.fetch.guard import REDIRECT_STATUSES, Verdict, guard_url
from worker.fetch.types import FetchFailure
from worker.platform.settings import Settings

#: Bytes of a receiver's answer read at most (the rest is never read).
MAX_RESPONSE_BYTES = 1024
#: Characters of that answer kept in `last_error`.
ERROR_SNIPPET_CHARS = 200
#: How long an idle connection to a receiver is kept, in seconds. Each receiving origin keeps
#: as many as may be delivered to one endpoint at once (`EVIDENCE_WEBHOOK_ENDPOINT_CONCURRENCY`).
KEEPALIVE_EXPIRY_SECONDS = 30.0


@dataclass(frozen=True)
class SendResult:
    """How one attempt went: `ok` for a 2xx; otherwise the status (if any) and why."""

    ok: bool
    status: int | None
    error: str | None
    seconds: float
    #: A metrics label: delivered, http_4xx, http_5xx, redirect, timeout, refused, error.
    outcome: str


class Sender:
    """One per worker process: a pooled, guarded HTTPS client for webhooks."""

    def __init__(self, settings: Settings, backend: httpcore.NetworkBackend | None = None) -> None:
        self.settings = settings
        self.backend = backend or GuardedBackend(
            settings.egress_allow_cidrs, settings.fetch_allowed_ports
        )
        self.client = guarded_client(
            self.backend,
            ca_bundle=str(settings.ca_bundle) if settings.ca_bundle else None,
            read_timeout=settings.webhook_read_timeout_seconds,
            connect_timeout=settings.webhook_connect_timeout_seconds,
            headers={"User-Agent": settings.user_agent, "Content-Type": "application/json"},
            max_keepalive=settings.webhook_endpoint_concurrency,
            keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS,
        )

    def send(self, url: str, body: bytes, headers: dict[str, str]) -> SendResult:
        """POST `body` to `url` within every bound; never raises for the receiver's sake."""
        start = time.perf_counter()
        target = guard_url(url, self.settings.fetch_allowed_ports, self.settings.egress_allow_cidrs)
        if isinstance(target, Verdict):
            return _failed(start, None, f"unsafe_url: {target.reason}", "refused")
        try:
            with (
                deadline_scope(self.settings.webhook_total_timeout_seconds),
                map_fetch_errors(Trail()),
                self.client.stream("POST", target.url, content=body, headers=headers) as response,
            ):
                snippet = _read_some(response)
                status = response.status_code
        except FetchFailure as failure:
            outcome = {"timeout": "timeout", "unsafe_url": "refused"}.get(failure.reason, "error")
            return _failed(start, None, f"{failure.reason}: {failure.detail}", outcome)
        if 200 <= status < 300:
            return SendResult(True, status, None, time.perf_counter() - start, "delivered")
        if status in REDIRECT_STATUSES:
            location = storable(response.headers.get("location", ""))[:ERROR_SNIPPET_CHARS]
            return _failed(
                start, status, f"redirect refused (HTTP {status} to {location})", "redirect"
            )
        # A receiver's answer is anyone's bytes: NUL among them made PostgreSQL refuse the
        # attempt's bookkeeping, and the delivery was retried for ever without back-off.
        text = storable(snippet.decode("utf-8", "replace")).strip()[:ERROR_SNIPPET_CHARS]
        return _failed(
            start, status, f"HTTP {status}" + (f": {text}" if text else ""), _klass(status)
        )

    def close(self) -> None:
        self.client.close()


def _read_some(response: httpx.Response) -> bytes:
    """At most MAX_RESPONSE_BYTES of the answer; the rest is never read."""
    out = b""
    for chunk in response.iter_raw():
        out += chunk
        if len(out) >= MAX_RESPONSE_BYTES:
            break
    return out[:MAX_RESPONSE_BYTES]


def _klass(status: int) -> str:
    return "http_5xx" if status >= 500 else "http_4xx"


def _failed(start: float, status: int | None, error: str, outcome: str) -> SendResult:
    return SendResult(False, status, error, time.perf_counter() - start, outcome)

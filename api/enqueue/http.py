"""How `evidence enqueue` reads the API's answers: retries, back-off, errors, auth.

A batch request: 200 with one result per item. 401/403 stop the run (the key is wrong; nothing
else will work). 503 (and 429/500/502/504, which proxies also send) and transport errors
(connect, read, timeouts, dropped connections) are retried with capped exponential back-off,
full jitter and at least Retry-After, then every line of the chunk counts as failed to submit;
resending is safe because the server deduplicates on the mutation_id. Each item's result is read
the same way: 202/200 submitted, 403 stops the run, 429 (a workspace quota) is sent again after
its Retry-After, any other (400/409) rejects that line only.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
AUTH_STATUSES = frozenset({401, 403})


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a transient failure is retried."""

    attempts: int = 5
    base_delay: float = 0.5  # seconds before the 2nd attempt, doubling after
    max_delay: float = 30.0
    max_retry_after: float = 60.0  # a longer Retry-After is capped here to keep runs bounded


class AuthError(Exception):
    """Raised when the API refuses the key (401/403): the batch cannot go on."""


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Read a Retry-After header (seconds or an HTTP date) as seconds from now."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def backoff_delay(
    policy: RetryPolicy,
    attempt: int,
    retry_after: float | None,
    rand: Callable[[], float] = random.random,
) -> float:
    """Seconds to sleep after failed `attempt` (1-based): full jitter, at least Retry-After."""
    ceiling: float = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
    delay = ceiling * rand()
    if retry_after is not None:
        delay = max(delay, min(retry_after, policy.max_retry_after))
    return delay


def error_of(response: httpx.Response) -> dict[str, Any]:
    """Take the error envelope from `response`, or make one from its status."""
    try:
        error = response.json().get("error")
    except (ValueError, AttributeError):
        error = None
    if not isinstance(error, dict):
        error = {"code": f"http_{response.status_code}", "message": response.text[:200]}
    return {**error, "http_status": response.status_code}


def results_of(response: httpx.Response, expected: int) -> dict[str, Any] | None:
    """The batch's `{"results": [...]}` when it answers every item, else None."""
    try:
        body = response.json()
    except ValueError:
        return None
    results = body.get("results") if isinstance(body, dict) else None
    if not isinstance(results, list) or len(results) != expected:
        return None
    if not all(isinstance(r, dict) and isinstance(r.get("status"), int) for r in results):
        return None
    return body  # type: ignore[no-any-return]


def retrievals_of(response: httpx.Response, expected: int) -> list[dict[str, Any] | None] | None:
    """The batch read's `retrievals` (one per id asked, null for unknown) when well-formed."""
    try:
        body = response.json()
    except ValueError:
        return None
    found = body.get("retrievals") if isinstance(body, dict) else None
    if not isinstance(found, list) or len(found) != expected:
        return None
    if not all(item is None or isinstance(item, dict) for item in found):
        return None
    return found


def item_error(result: dict[str, Any]) -> dict[str, Any]:
    """One item's error envelope, with its status, as the out file records errors."""
    error = result.get("error")
    if not isinstance(error, dict):
        error = {"code": f"http_{result.get('status')}", "message": "no error given"}
    return {**error, "http_status": result.get("status")}


def item_retry_after(result: dict[str, Any]) -> float | None:
    """Seconds a refused item should wait (`details.retry_after_seconds` of its error)."""
    details = (result.get("error") or {}).get("details") or {}
    value = details.get("retry_after_seconds") if isinstance(details, dict) else None
    return float(value) if isinstance(value, int | float) and value >= 0 else None


def item_auth_message(result: dict[str, Any]) -> str:
    """Explain an item's 403 in terms of what to fix."""
    detail = item_error(result).get("message") or ""
    return (
        f"the API refused the key (403 {detail}); check --key or "
        "EVIDENCE_API_KEY and that the key may use this workspace with scope agent:research"
    )


def auth_message(response: httpx.Response) -> str:
    """Explain a 401/403 in terms of what to fix."""
    detail = error_of(response).get("message") or ""
    return (
        f"the API refused the key ({response.status_code} {detail}); check --key or "
        "EVIDENCE_API_KEY and that the key may use this workspace with scope agent:research"
    )

"""How `evidence enqueue` reads the API's answers: retries, back-off, errors, auth.

Answers: 202/200 submitted. 401/403 stop the batch (the key is wrong; nothing else will work).
503 (and 429/500/502/504, which proxies also send) and transport errors (connect, read, timeouts,
dropped connections) are retried with capped exponential back-off, full jitter and at least
Retry-After, then the line counts as failed to submit; retrying a POST is safe because the server
deduplicates on the mutation_id. Any other answer (400/409/422...) rejects that line only.
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


def retrieval_of(response: httpx.Response) -> dict[str, Any] | None:
    """Take the retrieval from a 200/202 body (`{"retrieval": ...}` or the bare object)."""
    try:
        body = response.json()
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("retrieval"), dict):
        return dict(body["retrieval"])
    return dict(body) if isinstance(body, dict) and "state" in body else None


def auth_message(response: httpx.Response) -> str:
    """Explain a 401/403 in terms of what to fix."""
    detail = error_of(response).get("message") or ""
    return (
        f"the API refused the key ({response.status_code} {detail}); check --key or "
        "EVIDENCE_API_KEY and that the key may use this workspace with scope agent:research"
    )

"""Run one retrieval: claim it, produce its result, settle it (fenced by the claim's attempt)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

import structlog
from celery.exceptions import SoftTimeLimitExceeded

from worker import clock
from worker.content.results import failure_result
from worker.fetch.fetcher import Fetcher
from worker.fetch.fleet_metrics import MeteredFetcher
from worker.reasons import Reason
from worker.settings import get_settings
from worker.store import db, retrievals

if TYPE_CHECKING:
    from worker.content.pipeline import PipelineOutput

log = structlog.get_logger(__name__)

_fetcher: Fetcher | None = None


def get_fetcher() -> Fetcher:
    """The process's fetcher (one connection pool per worker process)."""
    global _fetcher
    if _fetcher is None:
        _fetcher = Fetcher(get_settings())
    return _fetcher


def reset_fetcher() -> None:
    """Drop the fetcher (after a fork, or when settings change in tests)."""
    global _fetcher
    _fetcher = None


def produce_output(claim: retrievals.Claim) -> PipelineOutput:
    """Fetch and extract: the content step, with the page's images. Never raises for a source."""
    from worker.content.pipeline import PipelineOutput, run_pipeline

    fetcher = MeteredFetcher(get_fetcher())
    try:
        return run_pipeline(fetcher, claim.url, claim.kind, claim.language)  # type: ignore[arg-type]
    except SoftTimeLimitExceeded:
        log.warning("soft_time_limit")
        return PipelineOutput(failure_result(claim.kind, Reason.TIMEOUT, clock.now()))  # type: ignore[arg-type]
    except Exception as exc:
        # Whatever a source makes a parser raise, it will raise again on every attempt: settle
        # now instead of failing until max_attempts (`unconfirmed`). The client sees only the
        # reason; the exception's text, which may quote the source, stays in the log.
        log.exception("content_step_failed", error=type(exc).__name__)
        return PipelineOutput(
            failure_result(claim.kind, Reason.UNSUPPORTED_CONTENT, clock.now())  # type: ignore[arg-type]
        )


def run_retrieval(retrieval_id: uuid.UUID) -> str:
    """Process one delivery of a retrieval; return what happened (for logs and tests)."""
    settings = get_settings()
    lease = timedelta(seconds=settings.lease_seconds)
    claim = db.with_transient_retry(lambda s: retrievals.claim(s, retrieval_id, clock.now(), lease))
    if claim is None:
        log.info("claim_skipped")
        return "skipped"
    structlog.contextvars.bind_contextvars(workspace_id=str(claim.workspace_id))
    log.info("claimed", attempt=claim.attempt, kind=claim.kind)
    output = produce_output(claim)
    result = output.result
    settled = retrievals.settle_claim(claim, result, clock.now(), output.images)
    log.info(
        "settled" if settled else "settle_fenced",
        attempt=claim.attempt,
        status=result["status"],
        reason=result["reason"],
    )
    return "settled" if settled else "fenced"

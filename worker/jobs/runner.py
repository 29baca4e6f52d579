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
    from worker.content.assets import PipelineOutput

log = structlog.get_logger(__name__)

_fetcher: Fetcher | None = None


def get_fetcher() -> Fetcher:
    """The process's fetcher (one connection pool per worker process)."""
    global _fetcher
    if _fetcher is None:
        _fetcher = Fetcher(get_settings())
    return _fetcher


def reset_fetcher() -> None:
    """Drop the fetcher without closing it: after a fork its sockets are the parent's."""
    global _fetcher
    _fetcher = None


def close_fetcher() -> None:
    """Close the process's fetcher (its pooled connections and Redis client), if it made one.

    Called when the process stops serving; a later `get_fetcher` makes a fresh one.
    """
    global _fetcher
    fetcher, _fetcher = _fetcher, None
    if fetcher is not None:
        fetcher.close()


def produce_output(claim: retrievals.Claim) -> PipelineOutput:
    """Fetch and extract: the content step, with the page's images. Never raises for a source."""
    from worker.content.assets import PipelineOutput, run_pipeline_with_assets

    try:
        fetcher = MeteredFetcher(get_fetcher())
        return run_pipeline_with_assets(fetcher, claim.url, claim.kind, claim.language)  # type: ignore[arg-type]
    except SoftTimeLimitExceeded:
        log.warning("soft_time_limit")
        return PipelineOutput(failure_result(claim.kind, Reason.TIMEOUT, clock.now()))  # type: ignore[arg-type]


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

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
from worker.jobs import notify
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
    """Drop the fetcher (after a fork, or when settings change in tests)."""
    global _fetcher
    _fetcher = None


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
    """Process one delivery of an interactive retrieval; what happened (for logs and tests)."""
    settings = get_settings()
    lease = timedelta(seconds=settings.lease_seconds)
    claim = db.with_transient_retry(lambda s: retrievals.claim(s, retrieval_id, clock.now(), lease))
    if claim is None:
        log.info("claim_skipped")
        # The claim may have expired a row past valid_until: announce it (were it still running
        # elsewhere, its waiters would only read it once more).
        notify.settled([retrieval_id])
        return "skipped"
    return run_claim(claim)


def run_next_batch() -> str:
    """Process one batch-lane message: claim the next batch retrieval fairly, run it."""
    lease = timedelta(seconds=get_settings().lease_seconds)
    claim = db.with_transient_retry(lambda s: retrievals.claim_next_batch(s, clock.now(), lease))
    if claim is None:
        log.info("claim_skipped", lane="batch")
        return "skipped"
    structlog.contextvars.bind_contextvars(retrieval_id=str(claim.retrieval_id))
    return run_claim(claim)


def run_claim(claim: retrievals.Claim) -> str:
    """Fetch, extract and settle a claimed retrieval; announce it once settled."""
    structlog.contextvars.bind_contextvars(workspace_id=str(claim.workspace_id))
    log.info("claimed", attempt=claim.attempt, kind=claim.kind)
    output = produce_output(claim)
    result = output.result
    settled = retrievals.settle_claim(claim, result, clock.now(), output.images)
    # A fenced settle may have expired it; a cancel or a newer attempt announce themselves.
    notify.settled([claim.retrieval_id])
    log.info(
        "settled" if settled else "settle_fenced",
        attempt=claim.attempt,
        status=result["status"],
        reason=result["reason"],
    )
    return "settled" if settled else "fenced"

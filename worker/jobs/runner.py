"""Run one retrieval: claim it, produce its result, settle it (fenced by the claim's attempt)."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import structlog
from celery.exceptions import SoftTimeLimitExceeded

from worker import clock
from worker.content.results import failure_result
from worker.fetch.fetcher import Fetcher
from worker.fetch.fleet_metrics import MeteredFetcher
from worker.jobs import freshness, notify
from worker.jobs.outcomes import Delivery, task_outcome
from worker.reasons import Reason
from worker.settings import get_settings
from worker.states import RetrievalState as S
from worker.store import db, retrievals

if TYPE_CHECKING:
    from worker.content.pipeline import FetcherLike, PipelineOutput

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


def produce_output(claim: retrievals.Claim, fetcher: FetcherLike | None = None) -> PipelineOutput:
    """Fetch and extract: the content step, with the page's images. Never raises for a source."""
    from worker.content.pipeline import PipelineOutput, run_pipeline

    fetcher = fetcher or MeteredFetcher(get_fetcher())
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


def run_retrieval(retrieval_id: uuid.UUID) -> dict[str, Any]:
    """Process one delivery of an interactive retrieval; what happened (`worker.jobs.outcomes`)."""
    settings = get_settings()
    lease = timedelta(seconds=settings.lease_seconds)
    claim = db.with_transient_retry(lambda s: retrievals.claim(s, retrieval_id, clock.now(), lease))
    if claim is None:
        log.info("claim_skipped")
        # The claim may have expired a row past valid_until: announce it (were it still running
        # elsewhere, its waiters would only read it once more).
        notify.settled([retrieval_id])
        return _recorded_outcome(retrieval_id, "skipped", None)
    return run_claim(claim)


def run_next_batch() -> dict[str, Any] | None:
    """Process one batch-lane message: claim the next batch retrieval fairly, run it.

    None when there was nothing to claim (another token ran the retrieval this one stood for).
    """
    lease = timedelta(seconds=get_settings().lease_seconds)
    claim = db.with_transient_retry(lambda s: retrievals.claim_next_batch(s, clock.now(), lease))
    if claim is None:
        log.info("claim_skipped", lane="batch")
        return None
    structlog.contextvars.bind_contextvars(retrieval_id=str(claim.retrieval_id))
    return run_claim(claim)


def run_claim(claim: retrievals.Claim) -> dict[str, Any]:
    """Fetch, extract and settle a claimed retrieval; announce it once settled."""
    structlog.contextvars.bind_contextvars(workspace_id=str(claim.workspace_id))
    log.info("claimed", attempt=claim.attempt, kind=claim.kind)
    plan = freshness.prepare(claim, get_fetcher(), MeteredFetcher(get_fetcher()))
    output = plan.output or produce_output(claim, plan.fetcher)
    result = output.result
    now = clock.now()
    remember = freshness.remember(claim, plan, result, now)
    settled = retrievals.settle_claim(claim, result, now, output.images, remember)
    freshness.settled(claim, plan, settled)
    # A fenced settle may have expired it; a cancel or a newer attempt announce themselves.
    notify.settled([claim.retrieval_id])
    log.info(
        "settled" if settled else "settle_fenced",
        attempt=claim.attempt,
        status=result["status"],
        reason=result["reason"],
    )
    if settled:
        return task_outcome(claim.retrieval_id, "settled", S.COMPLETED.value, result, claim.attempt)
    return _recorded_outcome(claim.retrieval_id, "fenced", claim.attempt)


def _recorded_outcome(
    retrieval_id: uuid.UUID, delivery: Delivery, attempt: int | None
) -> dict[str, Any]:
    """The outcome of a delivery that recorded nothing: the row as someone else left it."""
    row = db.with_transient_retry(lambda s: retrievals.get_retrieval(s, retrieval_id))
    if row is None:
        return task_outcome(retrieval_id, delivery, None, None, attempt)
    return task_outcome(retrieval_id, delivery, row.state, row.result, attempt)

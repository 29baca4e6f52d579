"""Run one retrieval: claim it, produce its result, settle it (fenced by the claim's attempt)."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

import structlog
from celery.exceptions import SoftTimeLimitExceeded

from worker import clock
from worker.content.results import failure_result
from worker.fetch.egress import deadline_scope
from worker.fetch.fetcher import Fetcher
from worker.fetch.fleet_metrics import MeteredFetcher
from worker.jobs import extract_pool, replay
from worker.reasons import Reason
from worker.settings import get_settings
from worker.store import db, retrievals

if TYPE_CHECKING:
    from worker.content.assets import PipelineOutput

log = structlog.get_logger(__name__)

_fetcher: Fetcher | None = None
_fetcher_lock = threading.Lock()


def get_fetcher() -> Fetcher:
    """The process's fetcher (one connection pool, politeness gate and robots memo per worker
    process: hundreds of threads start at once, and must all get the same one)."""
    global _fetcher
    with _fetcher_lock:
        if _fetcher is None:
            _fetcher = Fetcher(get_settings())
        return _fetcher


def reset_fetcher() -> None:
    """Drop the fetcher (after a fork, or when settings change in tests)."""
    global _fetcher
    _fetcher = None


def produce_output(claim: retrievals.Claim) -> PipelineOutput:
    """Fetch and extract: the content step, with the page's images. Never raises for a source.

    In a threads-pool worker the fetches run here and the extraction in the process pool
    (`produce_split`); in a prefork child both run here, bounded by Celery's soft time limit.
    """
    from worker.content.assets import PipelineOutput, run_pipeline_with_assets

    pool = extract_pool.get()
    if pool is not None:
        return produce_split(claim, pool)
    try:
        fetcher = MeteredFetcher(get_fetcher())
        return run_pipeline_with_assets(fetcher, claim.url, claim.kind, claim.language)  # type: ignore[arg-type]
    except SoftTimeLimitExceeded:
        log.warning("soft_time_limit")
        return PipelineOutput(failure_result(claim.kind, Reason.TIMEOUT, clock.now()))  # type: ignore[arg-type]


def produce_split(claim: retrievals.Claim, pool: extract_pool.ExtractPool) -> PipelineOutput:
    """Fetch in this thread, extract in `pool`, all within the retrieval's own time bound.

    Threads cannot be interrupted the way Celery's soft time limit interrupts a prefork child,
    so the same bound (fetch total + extract budget + margin, well inside the lease) is a
    deadline here: every fetch ends by it (on top of its own total timeout), and an extraction
    step still running (or still queued for a process) when it passes is stopped, its process
    killed and replaced. As with the soft limit, the extract budget is extraction's share of
    the bound, not a limit of its own: time the fetches did not use is extraction's too.
    """
    settings = get_settings()
    bound = settings.soft_time_limit
    deadline = time.monotonic() + bound

    def extract(fetched: replay.Fetched) -> object:
        left = deadline - time.monotonic()
        if left <= 0:
            raise extract_pool.ExtractionTimeout("no time left to extract")
        args = (claim.url, claim.kind, claim.language, fetched)
        return pool.run(replay.pipeline_step, args, left, left)

    try:
        with deadline_scope(bound):
            fetcher = MeteredFetcher(get_fetcher())
            return replay.drive(claim.url, claim.kind, claim.language, fetcher, extract)  # type: ignore[no-any-return]
    except extract_pool.ExtractionTimeout as exc:
        return _timed_out(claim, str(exc))


def _timed_out(claim: retrievals.Claim, why: str) -> PipelineOutput:
    """The result of a retrieval that overran its bound: unavailable/timeout, as prefork's."""
    from worker.content.assets import PipelineOutput

    log.warning("retrieval_timeout", detail=why)
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

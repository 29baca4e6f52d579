"""Run one retrieval: claim it, produce its result, settle it (fenced by the claim's attempt)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import structlog
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy.orm import Session

from worker.archive import capture
from worker.content.results import failure_result
from worker.domain import clock
from worker.domain.reasons import Reason
from worker.domain.states import RetrievalState as S
from worker.fetch import exchange, politeness, shared
from worker.fetch.egress import deadline_scope
from worker.fetch.fleet_metrics import MeteredFetcher
from worker.platform import confine, ranked_gate
from worker.platform.ranked_gate import ranked
from worker.platform.settings import get_settings
from worker.retrieval import claim_group, claims, extract_pool, notify, settle_group, transitions
from worker.retrieval import records as retrievals
from worker.retrieval import split_pipeline as replay
from worker.retrieval.freshness import revalidation as freshness
from worker.retrieval.outcomes import Delivery, task_outcome
from worker.retrieval.settles import SettleJob, settle_alone
from worker.store import db, retrieval_view

if TYPE_CHECKING:
    from worker.retrieval.pipeline import FetcherLike, PipelineOutput

log = structlog.get_logger(__name__)


def produce_output(claim: retrievals.Claim, fetcher: FetcherLike | None = None) -> PipelineOutput:
    """Fetch and extract: the content step, with the page's images. Never raises for a source.

    In a threads-pool worker the fetches run here and the extraction in the process pool
    (`produce_split`); in a prefork child both run here, bounded by Celery's soft time limit.
    `fetcher` is the one `worker.retrieval.freshness.revalidation` prepared (it records validators).
    """
    # Imported when first used: the pipeline loads trafilatura (about a second).
    from worker.retrieval.pipeline import PipelineOutput, run_pipeline

    pool = extract_pool.get()
    fetcher = fetcher or MeteredFetcher(shared.get_fetcher())
    try:
        if pool is not None:
            return produce_split(claim, pool, fetcher)
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


def produce_split(
    claim: retrievals.Claim, pool: extract_pool.ExtractPool, fetcher: FetcherLike
) -> PipelineOutput:
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
            return replay.drive(claim.url, claim.kind, claim.language, fetcher, extract)  # type: ignore[no-any-return]
    except extract_pool.ExtractionTimeout as exc:
        return _timed_out(claim, str(exc))


def _timed_out(claim: retrievals.Claim, why: str) -> PipelineOutput:
    """The result of a retrieval that overran its bound: unavailable/timeout, as prefork's."""
    # Imported when first used: the pipeline loads trafilatura (about a second).
    from worker.retrieval.pipeline import PipelineOutput

    log.warning("retrieval_timeout", detail=why)
    return PipelineOutput(failure_result(claim.kind, Reason.TIMEOUT, clock.now()))  # type: ignore[arg-type]


def run_retrieval(retrieval_id: uuid.UUID) -> dict[str, Any]:
    """Process one delivery of an interactive retrieval; what happened
    (`worker.retrieval.outcomes`)."""
    settings = get_settings()
    lease = timedelta(seconds=settings.lease_seconds)
    claimed = _claim_looking_up(lambda s: claims.claim(s, retrieval_id, clock.now(), lease))
    if claimed is None:
        log.info("claim_skipped")
        # The claim may have expired a row past valid_until: announce it (were it still running
        # elsewhere, its waiters would only read it once more).
        notify.settled([retrieval_id])
        return _recorded_outcome(retrieval_id, "skipped", None)
    return run_claim(*claimed)


def claim_next_batch() -> tuple[retrievals.Claim, freshness.Found] | None:
    """Claim the next batch retrieval the fair claim picks (`worker.retrieval.records`), with
    what its request led to last; None when the lane is empty. Grouped with other threads'
    claims in a threads-pool worker (`claim_group`)."""
    with ranked(ranked_gate.BATCH):  # its turn for a connection comes after interactive work's
        if _grouping():
            return claim_group.get().submit(None)
        lease = timedelta(seconds=get_settings().lease_seconds)
        return _claim_looking_up(lambda s: claims.claim_next_batch(s, clock.now(), lease))


def _claim_looking_up(
    claiming: Callable[[Session], retrievals.Claim | None],
) -> tuple[retrievals.Claim, freshness.Found] | None:
    """The claim, and in the same transaction what its request led to last (`freshness`).

    Should the look-up fail for any reason but the database itself, the transaction rolled
    back has claimed nothing: the row is claimed again without a look-up (nothing found, a
    full retrieval), so its attempts count and it cannot come back for ever unclaimed.
    """
    try:
        return db.with_transient_retry(_looking_up(claiming, freshness.look_up))
    except Exception as exc:
        if confine.group_wide(exc):
            raise
        confine.record("claim", "nothing_found", exc)
        return db.with_transient_retry(_looking_up(claiming, lambda _s, _c: (None, None)))


def _looking_up(
    claiming: Callable[[Session], retrievals.Claim | None],
    look_up: Callable[[Session, retrievals.Claim], freshness.Found],
) -> Callable[[Session], tuple[retrievals.Claim, freshness.Found] | None]:
    def work(session: Session) -> tuple[retrievals.Claim, freshness.Found] | None:
        claim = claiming(session)
        return None if claim is None else (claim, look_up(session, claim))

    return work


def run_claim(claim: retrievals.Claim, found: freshness.Found) -> dict[str, Any]:
    """Fetch, extract and settle a claimed retrieval; announce it once settled.

    What it queues for in this process (a host's fetch slot, an extraction process, a database
    connection) an interactive retrieval gets before the batch lane's work; a busy host's
    slots are shared between the workspaces waiting for it (`worker.fetch.politeness`).

    An exception about this retrieval (raised anywhere from the look-up's use to its settle)
    is its own: its claim is given back (`give_back`), and the thread goes on.
    """
    with (
        ranked(ranked_gate.BATCH if claim.lane == "batch" else ranked_gate.INTERACTIVE),
        politeness.for_workspace(str(claim.workspace_id)),  # its turn at a busy host's slots
    ):
        try:
            return _run_claim(claim, found)
        except Exception as exc:  # noqa: BLE001  (confined to this retrieval, logged there)
            return give_back(claim, exc)


def give_back(claim: retrievals.Claim, exc: BaseException) -> dict[str, Any]:
    """A claim whose run raised: back to pending now, or `unconfirmed` after its last attempt,
    so a retrieval that fails the same way every time settles after `max_attempts` and never
    loops. Never raises: if the database cannot be written now, the lease and the sweep do
    the same later."""
    log.error("run_failed", attempt=claim.attempt, error=type(exc).__name__, exc_info=exc)
    max_attempts = get_settings().max_attempts
    try:
        state = db.with_transient_retry(
            lambda s: transitions.give_back(s, claim, clock.now(), max_attempts)
        )
    except Exception as write_error:  # noqa: BLE001
        log.warning("give_back_failed", error=type(write_error).__name__)
        state = None
    outcome = {S.PENDING.value: "repended", S.UNCONFIRMED.value: "unconfirmed"}.get(state or "")
    confine.record("run", outcome or "left", exc, retrieval_id=str(claim.retrieval_id))
    if state == S.UNCONFIRMED.value:
        notify.settled([claim.retrieval_id])
    return task_outcome(claim.retrieval_id, "failed", state, None, claim.attempt)


def _run_claim(claim: retrievals.Claim, found: freshness.Found) -> dict[str, Any]:
    structlog.contextvars.bind_contextvars(workspace_id=str(claim.workspace_id))
    log.info("claimed", attempt=claim.attempt, kind=claim.kind)
    # The fetches' exchanges, archived with the revision they produce or confirm.
    with exchange.collecting() if get_settings().archive_enabled else nullcontext() as exchanges:
        plan = freshness.prepare(
            claim, found, shared.get_fetcher(), MeteredFetcher(shared.get_fetcher())
        )
        output = plan.output or produce_output(claim, plan.fetcher)
    return _settled_output(claim, plan, output, exchanges)


def _settled_output(
    claim: retrievals.Claim,
    plan: freshness.Plan,
    output: PipelineOutput,
    exchanges: list[exchange.Exchange] | None = None,
) -> dict[str, Any]:
    """Settle `output` (fenced by the claim) and announce it."""
    result = output.result
    now = clock.now()
    remember = freshness.remember(claim, plan, result, now)
    if exchanges:
        remember = capture.after_settle(claim.workspace_id, claim.retrieval_id, exchanges, remember)
    job = SettleJob(claim, result, now, output.images, remember, freshness.stored_revision(plan))
    settled = _settle(job)
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


def _grouping() -> bool:
    """Whether batch-lane claims and settles are grouped: in a threads-pool worker, where
    many threads claim and settle at once (a prefork child runs one retrieval at a time)."""
    return extract_pool.get() is not None


def _settle(job: SettleJob) -> bool:
    """Settle a claim: a threads-pool worker writes batch-lane settles in groups
    (`settle_group`); everything else is written in its own transaction."""
    if job.claim.lane == "batch" and _grouping():
        return settle_group.get().submit(job)
    return settle_alone(job)


def _recorded_outcome(
    retrieval_id: uuid.UUID, delivery: Delivery, attempt: int | None
) -> dict[str, Any]:
    """The outcome of a delivery that recorded nothing: the row as someone else left it."""
    row = db.with_transient_retry(lambda s: retrieval_view.get_retrieval(s, retrieval_id))
    if row is None:
        return task_outcome(retrieval_id, delivery, None, None, attempt)
    return task_outcome(retrieval_id, delivery, row.state, row.result, attempt)

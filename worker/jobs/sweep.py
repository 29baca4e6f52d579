"""The sweep: no retrieval is left pending or running forever.

Run by Celery beat every `EVIDENCE_SWEEP_INTERVAL_SECONDS`. In order: (1) expire what passed
`valid_until`; (2) rescue running rows whose lease ran out (back to pending while attempts
remain, else unconfirmed), announcing what settled; (3) publish pending rows the broker never
got or presumably lost, each to its own lane's queue; (4) every few minutes, purge archived
raw records past their retention and seal the WARC files dead writers left open.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import structlog
from sqlalchemy.orm import Session

from worker.archive import retention, warc_files
from worker.domain import clock
from worker.jobs import outbox
from worker.jobs.celery_app import LANE_QUEUES
from worker.platform import confine
from worker.platform.settings import get_settings
from worker.retrieval import notify, publication, transitions
from worker.store import db
from worker.store.models import LANES

log = structlog.get_logger(__name__)

#: Most rows one sweep publishes; the next sweep takes the rest.
PUBLISH_BATCH = 500
#: Most rows one sweep expires or rescues one at a time, after its statements failed.
ROW_BY_ROW_BATCH = 1000


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did."""

    expired: int
    repended: int
    unconfirmed: int
    published: int


def publish_limit(stale: int, queued: int | None) -> int:
    """How many stale pending rows to publish again, given the broker's queue length.

    Messages still queued will be delivered: republishing them only adds no-op duplicates, so a
    long backlog is not copied every sweep. After a broker restart the queue is empty and every
    stale row is published. With the broker unreachable, nothing is tried.
    """
    if queued is None:
        return 0
    return max(0, stale - queued)


def run_sweep(now: datetime | None = None) -> SweepReport:
    """One pass of the sweep (each step in its own short transaction).

    Expiry and rescue are one statement each over every row; should one fail for any reason
    but the database itself (a row this version cannot read, say), both are done again one row
    at a time, so one row's failure is its own (`confine`) and the others are swept.
    """
    settings = get_settings()
    now = now or clock.now()
    expired: list[uuid.UUID] = []
    try:
        expired = db.with_transient_retry(lambda s: transitions.expire_due(s, now))
        repended, unconfirmed = db.with_transient_retry(
            lambda s: transitions.rescue_lost(s, now, settings.max_attempts)
        )
    except Exception as exc:
        if confine.group_wide(exc):
            raise
        log.warning("sweep_group_failed", error=type(exc).__name__)
        more, repended, unconfirmed = _row_by_row(now, settings.max_attempts)
        expired = [*expired, *more]
    notify.settled([*expired, *unconfirmed])
    published = _publish_due(now, timedelta(seconds=settings.republish_after_seconds))
    if settings.archive_enabled and retention.due():
        _maintain_archive(now, settings.archive_dir, settings.archive_retention_days)
    report = SweepReport(len(expired), repended, len(unconfirmed), published)
    if any((expired, repended, unconfirmed, published)):
        log.info("sweep", **report.__dict__)
    return report


def _maintain_archive(now: datetime, directory: Path, days: float) -> None:
    """Seal the WARC files dead writers left open, and purge what is past its retention
    (`days`, 0: none); a failure is logged and tried again next time."""
    try:
        if directory.is_dir():
            warc_files.recover(directory)
        if not days:
            return
        purged = retention.purge(directory, now, days)
    except Exception as exc:  # noqa: BLE001  (the sweep's own work is done; the next purge retries)
        log.warning("archive_purge_failed", error=type(exc).__name__)
        return
    if purged.rows or purged.files:
        log.info("archive_purged", **purged.__dict__)


def _row_by_row(now: datetime, max_attempts: int) -> tuple[list[uuid.UUID], int, list[uuid.UUID]]:
    """Expiry and rescue, each row in its own transaction: (expired, re-pended, unconfirmed)."""
    due = db.with_transient_retry(lambda s: transitions.due_for_sweep(s, now, ROW_BY_ROW_BATCH))
    expired: list[uuid.UUID] = []
    unconfirmed: list[uuid.UUID] = []
    repended = 0

    def sweep_one(retrieval_id: uuid.UUID) -> None:
        nonlocal repended

        def write(session: Session) -> tuple[list[uuid.UUID], int, list[uuid.UUID]]:
            gone = transitions.expire_due(session, now, retrieval_id)
            back, lost = transitions.rescue_lost(session, now, max_attempts, retrieval_id)
            return gone, back, lost

        gone, back, lost = db.with_transient_retry(write)
        expired.extend(gone)
        repended += back
        unconfirmed.extend(lost)

    confine.each_alone("sweep", due, sweep_one, lambda i: {"retrieval_id": str(i)})
    return expired, repended, unconfirmed


def plan_publish(
    due: list[tuple[uuid.UUID, str]], never_published: set[uuid.UUID], queued: dict[str, int]
) -> dict[str, list[uuid.UUID]]:
    """Which due rows to publish, by lane: every never-published one, and the stale ones
    beyond what that lane's queue still holds (see `publish_limit`), oldest first."""
    plan: dict[str, list[uuid.UUID]] = {}
    for lane in LANES:
        ids = [retrieval_id for retrieval_id, row_lane in due if row_lane == lane]
        fresh = [i for i in ids if i in never_published]
        stale = [i for i in ids if i not in never_published]
        chosen = fresh + stale[: publish_limit(len(stale), queued.get(LANE_QUEUES[lane], 0))]
        if chosen:
            plan[lane] = chosen
    return plan


def _publish_due(now: datetime, republish_after: timedelta) -> int:
    with db.session_scope() as session:
        due = publication.due_for_publish(session, now, republish_after, PUBLISH_BATCH)
        if not due:
            return 0
        queued = outbox.queue_lengths([LANE_QUEUES[lane] for lane in LANES])
        if queued is None:
            return 0  # the broker is down: try again next sweep
        never = publication.unpublished_among(session, [retrieval_id for retrieval_id, _ in due])
        sent: list[uuid.UUID] = []

        def publish(lane_ids: tuple[str, list[uuid.UUID]]) -> None:
            sent.extend(outbox.publish(lane_ids[1], lane_ids[0]))

        # One lane's failure is its own: its rows stay due, the next sweep tries them again.
        confine.each_alone(
            "sweep",
            list(plan_publish(due, never, queued).items()),
            publish,
            lambda lane_ids: {"lane": lane_ids[0], "rows": len(lane_ids[1])},
        )
        publication.mark_published(session, sent, clock.now())
        return len(sent)

"""The watch scheduler's Celery task: a tick (`worker.watches.scheduler`) sent by beat every
`EVIDENCE_WATCH_TICK_SECONDS`, its new retrievals published to the batch lane after the commit."""

from __future__ import annotations

import structlog

from worker.domain import clock
from worker.jobs import outbox
from worker.jobs.celery_app import WATCH_TICK_TASK, app
from worker.retrieval import publication
from worker.store import db
from worker.watches import liveness, scheduler

log = structlog.get_logger(__name__)


def run_tick() -> scheduler.TickReport:
    """One tick: record the due runs, publish them, note the tick's time."""
    now = clock.now()
    report = db.with_transient_retry(lambda s: scheduler.tick(s, now))
    if report.created:
        sent = set(outbox.publish(report.created, "batch"))
        unsent = [i for i in report.created if i not in sent]
        if unsent:  # the broker did not take them: the sweep publishes them later
            db.with_transient_retry(lambda s: publication.mark_unpublished(s, unsent))
    liveness.record_tick(now.timestamp())
    if report.created or report.refused or report.missed or report.reported:
        log.info(
            "watch_tick",
            started=len(report.created),
            replayed=report.replayed,
            refused=report.refused,
            missed=report.missed,
            reported=report.reported,
        )
    return report


@app.task(name=WATCH_TICK_TASK, soft_time_limit=60, time_limit=90, send_events=False)
def watch_tick() -> dict[str, int]:
    """Start the due watches' runs (see `run_tick`)."""
    report = run_tick()
    return {
        "started": len(report.created),
        "replayed": report.replayed,
        "refused": report.refused,
        "missed": report.missed,
        "reported": report.reported,
    }
